"""`autotune run`: the study in this process, or `--workers` processes on this machine, behind the live view."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune.cli import common
from autotune.core import redact

if TYPE_CHECKING:  # (the command imports the study's packages only once it runs)
    from autotune.spec import RunConfig


def cmd(args: argparse.Namespace) -> int:

    from autotune.observe import progress, tracking
    from autotune.study import run

    cfg = common.load(args)
    if getattr(args, "workers", None) is not None or getattr(args, "gpus", None) is not None:
        return _run_workers(args, cfg)
    trackers = tracking.callbacks(cfg)  # MLflow, checked before the study exists
    view = progress.RunView(cfg, plain=args.plain or not sys.stdout.isatty())
    return _show_run(cfg, view, lambda: run(cfg, fresh=args.fresh, callbacks=[view.on_trial, *trackers],
                                            on_start=_with_join_line(cfg, view.on_start)))


def _with_join_line(cfg: RunConfig, on_start: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
    """`on_start`, then (a study other machines can join, whose config names user code) how a worker joins it: with
    its code hash (study/trust.py), the only way such a worker runs the study's code."""
    def start(study: Any, todo: int) -> None:
        on_start(study, todo)
        from autotune.study import trust

        line = None if cfg.study.storage.startswith("sqlite") else \
            trust.join_line(study, common.quoted(cfg.study.storage))
        if line is not None:
            print(f"note: other machines join with: {line}", file=sys.stderr, flush=True)

    return start


def _show_run(cfg: RunConfig, view: Any, start: Callable[[], Any], terms: list[int] | None = None) -> int:
    """Run the study (`start` returns it) behind the live view; Ctrl-C keeps every finished trial and exits 130 (a
    SIGTERM counted in `terms`, 143). A `--workers` driver says what it stopped (local_workers.WorkersStopped)."""
    t0 = time.perf_counter()
    try:
        with common.trials_shown():
            study = start()
    except KeyboardInterrupt as e:
        common.ignore_more_interrupts()
        view.close()
        how = "terminated" if terms else "interrupted"
        line = e.line(redact(cfg.study.storage)) if hasattr(e, "line") else \
            f"finished trials are kept in {redact(cfg.study.storage)}; run again to resume"
        print(f"{how}: {line}", file=sys.stderr)
        return 143 if terms else 130
    view.close()
    from autotune.observe import TuneResult, describe

    view.summary(TuneResult(study=study, config=cfg), time.perf_counter() - t0)
    line = describe(study, cfg)
    if line:
        print(line)
    failed = view.all_failed()
    if failed is not None:  # (a script or CI that runs a study learns it produced nothing)
        print(f"error: {failed}", file=sys.stderr)
        return 1
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="YAML run file, e.g. search_spaces/cnn.yaml")
    common.add_study_flags(p)
    p.add_argument("--fresh", action="store_true", help="delete the stored study of this name and start over")
    p.add_argument("--plain", action="store_true", help="plain lines instead of a live display")
    p.add_argument("--workers", type=int, help="worker processes on this machine sharing the study (one GPU each, "
                                               "or a share of the CPU cores); needs journal:// or an RDB server")
    p.add_argument("--gpus", type=lambda s: s.split(","), help="GPU index per worker, e.g. 0,1 (default: every "
                                                               "visible GPU, one worker each; repeat to share)")
    p.add_argument("--fail-stale", action="store_true", help="first fail (and retry once) every RUNNING trial: "
                                                             "for a journal study whose workers were all killed")


def _run_workers(args: argparse.Namespace, cfg: RunConfig) -> int:

    from autotune.observe import progress, tracking
    from autotune.study import local_workers, workers

    slots = workers.slots_for(cfg, args.workers, args.gpus)
    if args.fail_stale:
        fail_stale(cfg)
    trackers = tracking.callbacks(cfg)  # the driver logs every trial to MLflow, not the workers
    view = progress.RunView(cfg, plain=args.plain or not sys.stdout.isatty())
    print(f"{len(slots)} worker(s): " + "; ".join(s.describe() for s in slots), flush=True)
    with common.sigterm_stops() as terms:
        return _show_run(cfg, view, lambda: local_workers.run_parallel(
            cfg, slots, fresh=args.fresh, on_start=_with_join_line(cfg, view.on_start), on_trial=view.on_trial,
            on_note=lambda line: print(line, file=sys.stderr, flush=True), callbacks=trackers), terms)


def fail_stale(cfg: RunConfig) -> None:
    from autotune.study import workers

    failed = workers.fail_stale(cfg)
    if failed:
        print(f"failed {len(failed)} stale RUNNING trial(s) and queued their retries: "
              f"{', '.join(map(str, failed))}", file=sys.stderr)
