"""The spawned worker processes of `autotune run --workers` on this machine and their driver (`run_parallel`): it
creates or resumes the study, starts one process per slot (workers.slots_for), shows each trial they finish once, and on
Ctrl-C or SIGTERM ends them and says what it stopped (`WorkersStopped`). Where each worker runs and one worker's loop
are workers.py's.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import optuna

from autotune.config import from_dict
from autotune.core import (
    AutotuneError,
    ConfigError,
    ConfigWarning,
    config_warnings_as_lines,
    describe_exception,
    environ,
    lifetime,
)
from autotune.core import optuna_compat as compat
from autotune.spec import RunConfig, TrialRecord
from autotune.study import orphans, storage
from autotune.study import runner as study_mod
from autotune.study.budget import TrialCallback, counts, is_surplus
from autotune.study.workers import POLL_S, Slot, run_worker, worker_config


def _child(cfg_dict: dict[str, Any], source: str, slot: Slot) -> None:
    """Entry point of a spawned worker (its environment was set by the parent before the spawn)."""
    parent = os.getppid()
    lifetime.as_program()  # autotune's own process: it may end itself (a stuck trial, a deadline after SIGTERM)
    lifetime.die_with_parent()
    lifetime.watch_parent(parent)
    import torch

    torch.set_num_threads(slot.threads)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore", ConfigWarning)  # this process's own: the driver has shown them once
    cfg = from_dict(cfg_dict, source=source)
    try:
        # A terminated worker fails its trial through Optuna (KeyboardInterrupt) instead of leaving it RUNNING
        # (before this, SIGTERM ends the worker outright: it holds no trial yet).
        # (no line per failed trial here: the driver's view shows each one)
        with lifetime.sigterm_interrupts(), compat.failed_trial_lines_off():
            run_worker(cfg, sampler_seed_offset=slot.index)  # no tracker: the driver logs every trial once
    except KeyboardInterrupt:
        sys.exit(130)
    except AutotuneError as e:
        print(f"error: worker {slot.index}: {e}", file=sys.stderr)
        sys.exit(2)


def checked_in_child(cfg_dict: dict[str, Any], source: str, slot: Slot) -> str:
    """`fit.preflight` and the distillation teacher, run in a spawned process pinned like `slot`: the checks
    that touch the device (precision, casts, the device's name) create a CUDA context, and one made in the
    driver would keep its memory for the whole study. Returns the device's name; the child's ConfigError or
    AutotuneError is raised here as the same one-line error."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    with environ.setenv(slot.env()):
        p = ctx.Process(target=_preflight_child, args=(cfg_dict, source, send), name="autotune-preflight")
        p.start()
    send.close()
    try:
        answer = recv.recv()
    except EOFError:
        answer = None
    finally:
        recv.close()
        p.join()
    if answer is None:
        raise AutotuneError(f"the device check process (GPU {slot.gpu}) {lifetime.exit_text(p.exitcode)} before it "
                            "answered")
    kind, *rest = answer
    if kind == "config":
        raise ConfigError(*rest)
    if kind != "ok":
        raise AutotuneError(f"device check: {rest[0]}")
    return str(rest[0])


def _preflight_child(cfg_dict: dict[str, Any], source: str, conn: Any) -> None:
    """Entry point of the spawned device check: ("ok", device name), ("config", file, key, message) or
    ("error", one line)."""
    lifetime.as_program()
    lifetime.die_with_parent()
    try:
        with config_warnings_as_lines():  # the checks' warnings (a batch past the data) as the driver's are
            cfg = from_dict(cfg_dict, source=source)
            study_mod.preflight(cfg)
        study_mod.resolve_teacher(cfg)  # the teacher file exists before any worker needs it
        conn.send(("ok", study_mod.device_label(cfg)))
    except ConfigError as e:
        conn.send(("config", e.file, e.key_path, e.message))
    except AutotuneError as e:
        conn.send(("error", str(e)))
    except Exception as e:  # a user's factory or dataset raising: one line, not a traceback from a child
        conn.send(("error", describe_exception(e)))
    finally:
        conn.close()


class _Pool:
    """The spawned worker processes of one run, and the exits already told."""

    def __init__(self, cfg: RunConfig, slots: list[Slot]) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        cfg_dict = cfg.to_dict()
        self.procs: list[tuple[Slot, Any]] = []
        for slot in slots:
            with environ.setenv(slot.env()):
                p = ctx.Process(target=_child, args=(worker_config(cfg_dict, slot), cfg.source, slot),
                                name=f"autotune-worker-{slot.index}")
                p.start()
            self.procs.append((slot, p))
        self.reported: set[int] = set()

    def alive(self) -> bool:
        return any(p.is_alive() for _, p in self.procs)

    def tell_exits(self, note: Callable[[str], None], then: str = "") -> None:
        """A line for each worker that ended with an error since the last call."""
        for slot, p in self.procs:
            if not p.is_alive() and p.pid not in self.reported and p.exitcode not in (0, None):
                self.reported.add(p.pid)
                note(f"worker {slot.index} (pid {p.pid}) {lifetime.exit_text(p.exitcode)}{then}")

    def join(self) -> None:
        for _, p in self.procs:
            p.join()

    def terminate(self) -> int:
        """End every worker still alive (how many there were): a SIGTERM fails its trial through Optuna, and a
        worker ends itself within lifetime.EXIT_GRACE_S; one still there after that is killed (its trial is an
        orphan the next run fails and retries)."""
        alive = [p for _, p in self.procs if p.is_alive()]
        for p in alive:  # (Ctrl-C reached them too)
            p.terminate()
        deadline = time.monotonic() + lifetime.EXIT_GRACE_S + 10
        for p in alive:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in alive:
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
        return len(alive)

    def running(self, study: optuna.Study) -> list[int]:
        """The numbers of the trials this pool's workers are running now (not another machine's workers')."""
        host = socket.gethostname()
        pids = {str(p.pid) for _, p in self.procs}
        out = []
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            owner = str(TrialRecord.of(t).worker or "").split(":")
            if len(owner) > 1 and owner[0] == host and owner[1] in pids:
                out.append(t.number)
        return sorted(out)


class WorkersStopped(KeyboardInterrupt):
    """Ctrl-C or SIGTERM ended `run_parallel`: the driver ended its `workers` and with them their running `trials`
    (recorded FAIL, retried on resume); the study keeps its `finished` trials. `line` says so in one line."""

    def __init__(self, workers: int, trials: list[int], finished: int) -> None:
        super().__init__()
        self.workers, self.trials, self.finished = workers, trials, finished

    def line(self, storage_shown: str) -> str:
        trials = f"their running trial(s) {', '.join(map(str, self.trials))} (recorded FAIL, retried on resume)" \
            if self.trials else "no running trial"
        return (f"stopped {self.workers} worker(s) and {trials}; the study keeps its {self.finished} finished "
                f"trial(s) in {storage_shown}; run the same command again to resume")


class _Feed:
    """Hands each trial the workers finish, once, to the view and the callbacks (never a surplus trial)."""

    def __init__(self, study: optuna.Study, on_trial: TrialCallback | None, callbacks: list[TrialCallback]) -> None:
        self.study = study
        self.on_trial = on_trial
        self.callbacks = callbacks
        self.shown = {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}

    def __call__(self) -> None:
        for t in sorted(self.study.get_trials(deepcopy=False), key=lambda t: t.number):
            if t.state.is_finished() and t.number not in self.shown:
                self.shown.add(t.number)
                if is_surplus(t):
                    continue  # a lost race, not a trial anyone ran
                if self.on_trial is not None:
                    self.on_trial(self.study, t)
                for cb in self.callbacks:
                    cb(self.study, t)


def _open_for_workers(cfg: RunConfig, slots: list[Slot], fresh: bool,
                      note: Callable[[str], None]) -> optuna.Study:
    """Checks, then the study (created or resumed)."""
    storage.check_shared(cfg, len(slots))
    device = None
    if any(slot.gpu is not None for slot in slots):
        # The driver only watches: a CUDA context of its own would hold GPU memory all study long.
        device = checked_in_child(worker_config(cfg.to_dict(), slots[0]), cfg.source, slots[0])
    else:
        study_mod.preflight(cfg)
        study_mod.resolve_teacher(cfg)  # the teacher file exists before any worker needs it
    study = study_mod.open_study(cfg, fresh=fresh, device_name=device)
    study_mod.note_orphans(orphans.reap(study), note)  # what a killed earlier run left RUNNING
    return study


def run_parallel(cfg: RunConfig, slots: list[Slot], fresh: bool = False,
                 on_start: Callable[[optuna.Study, int], None] | None = None,
                 on_trial: TrialCallback | None = None, on_note: Callable[[str], None] | None = None,
                 poll_s: float = POLL_S, callbacks: list[TrialCallback] | None = None) -> optuna.Study:
    """Create or resume the study, run one spawned worker per slot, show finished trials as they land.

    `callbacks` (MLflow's tracker) run here in the driver, not in the workers: it sees every trial finish (_Feed),
    so each is logged exactly once, over one client, with one warning if the server fails; workers never import
    MLflow."""
    note = on_note or (lambda s: print(s, file=sys.stderr))
    study = _open_for_workers(cfg, slots, fresh, note)
    hooks = study_mod.start_run(callbacks, study)
    n = cfg.study.n_trials
    feed = _Feed(study, on_trial, list(callbacks or []))
    todo = -1 if n is None else max(0, n - counts(study.get_trials(deepcopy=False)).finished)
    if on_start is not None:
        on_start(study, todo)
    if todo == 0:
        study_mod.finish_run(hooks, study, "FINISHED")
        return study
    pool = _Pool(cfg, slots)
    try:
        while pool.alive():
            feed()
            pool.tell_exits(note, "; the others carry on")
            time.sleep(poll_s)
    except KeyboardInterrupt:
        trials = _quietly(lambda: pool.running(study), [])
        stopped = pool.terminate()
        if hooks:
            feed()  # the trials the workers failed on their way out
            study_mod.finish_run(hooks, study, "KILLED")
        finished = _quietly(lambda: counts(study.get_trials(deepcopy=False)).finished, 0)
        raise WorkersStopped(stopped, trials, finished) from None
    pool.join()
    feed()
    pool.tell_exits(note)
    _wrap_up(cfg, study, hooks, note)
    return study


def _quietly(read: Callable[[], Any], default: Any) -> Any:
    """A storage read for the stop line: an interrupted run says what it can, never a second traceback."""
    try:
        return read()
    except Exception:
        return default


def _wrap_up(cfg: RunConfig, study: optuna.Study, hooks: list[study_mod.RunCallback],
             note: Callable[[str], None]) -> None:
    """Every worker has exited: say what raced, end the callbacks' run, and fail a study left short."""
    surplus = sum(1 for t in study.get_trials(deepcopy=False) if is_surplus(t))
    if surplus:
        note(f"{surplus} trial(s) ended PRUNED as surplus: workers raced for the last slots and these never ran "
             "(not failures; left out of the counts)")
    n = cfg.study.n_trials
    finished = counts(study.get_trials(deepcopy=False)).finished
    short = n is not None and n != finished and cfg.study.timeout is None
    study_mod.finish_run(hooks, study, "FAILED" if short else "FINISHED")
    if short:
        raise AutotuneError(f"every worker stopped and the study holds {finished} of its {n} finished trials: see the "
                            f"workers' errors above; run again to resume")


__all__ = ["WorkersStopped", "checked_in_child", "run_parallel"]
