"""`autotune worker`: join an existing study from any machine and run its trials until it is done."""

from __future__ import annotations

import argparse
import os
import sys

from autotune.cli import common
from autotune.cli.run import fail_stale
from autotune.core import redact


def cmd(args: argparse.Namespace) -> int:

    from autotune.observe import progress, tracking
    from autotune.study import budget, faults_named, trust, workers
    from autotune.study import runner as study_mod

    code_hash = args.code_hash or os.environ.get(trust.HASH_ENV) or None
    cfg, study = workers.join(args.storage, args.study, args.n_trials, args.timeout, code_hash=code_hash,
                              trust=args.trust_stored_code)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    for line in study_mod.version_notes(study):
        print(f"note: {line}", file=sys.stderr)
    if args.fail_stale:
        fail_stale(cfg)
    trackers = tracking.callbacks(cfg)  # this worker logs its own trials to the study's MLflow parent run
    view = progress.RunView(cfg, plain=True)
    me = workers.worker_id()
    print(f"worker {me} joined study {cfg.study.name} ({redact(cfg.study.storage)}); "
          f"{budget.counts(study.get_trials(deepcopy=False)).finished} of {cfg.study.n_trials} finished", flush=True)
    try:
        with common.trials_shown(), faults_named(cfg):  # a full disk, a server gone: one line
            res = workers.run_worker(cfg, sampler_seed_offset=None, callbacks=[view.on_trial, *trackers],
                                     study=study)
    except KeyboardInterrupt:
        common.ignore_more_interrupts()
        print("interrupted: this worker's finished trials are kept; its running one was stopped (interrupted)",
              file=sys.stderr)
        return 130
    c = budget.counts(res.study.get_trials(deepcopy=False))
    print(f"worker {me} ran {res.ran - res.surplus} trial(s); the study holds {c.finished} finished, "
          f"{c.running} running, {c.failed} failed")
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage", required=True, help="the study's storage: postgresql://..., mysql://... or "
                                                    "journal:///path (SQLite is refused: it cannot share)")
    p.add_argument("--study", required=True, help="the study's name")
    p.add_argument("--n-trials", type=int, help="finished trials the study should hold (default: its config's)")
    p.add_argument("--timeout", type=float, help="seconds this worker runs at most")
    p.add_argument("--threads", type=int, help="torch CPU threads for this worker (default: torch's)")
    p.add_argument("--fail-stale", action="store_true", help="first fail (and retry once) every RUNNING trial: "
                                                             "for a journal study whose workers were all killed")
    p.add_argument("--code-hash", metavar="HASH", help="a study whose stored config names your code (trainer:, "
                                                        "factories) runs it only if the config is still the one "
                                                        "launched: the hash `autotune run`/`launch` printed (default: "
                                                        "$AUTOTUNE_CODE_HASH)")
    p.add_argument("--trust-stored-code", action="store_true", help="run the code the stored config names without "
                                                                    "that check (you trust everyone who can write "
                                                                    "the storage)")
