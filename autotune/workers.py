"""Many workers on one study: processes on this machine (one GPU or a share of the cores each) or
`autotune worker` on any machine, all sharing the study through its storage. No coordinator of our own:
the storage is the only shared state.

Three rules keep a shared study honest:
- Exact budget. A worker starts a trial only while finished + running < n_trials, and a trial that
  lost a race (more workers passed that check than slots were left) fails itself as `surplus` before
  it samples anything: a trial runs only if fewer than n_trials trials numbered below it are still
  alive (finished, running or waiting). Trial numbers come from the storage in creation order, so
  this is exact on RDB and journal storages alike.
- Stale trials. A trial whose worker is provably gone (a dead process on this host; on RDB storages
  with heartbeats, SQLite included, a heartbeat older than `grace_period`) is failed as `orphaned` and
  retried once with the same params (orphans.py); every worker looks every grace_period / 2 seconds
  (2 s without heartbeats), mid-trial and while waiting too. A dead worker on another host without
  heartbeats (a journal on NFS) cannot be seen (`autotune worker --fail-stale` clears those by hand).
- Waiting. A worker whose budget is all in flight elsewhere waits instead of exiting while it can
  still tell a dead trial: the study always ends with n_trials finished trials if any worker lives.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from . import orphans, samplers, tracking
from . import study as study_mod
from .config import RunConfig, from_dict
from .distributed import cpu_cores, devices_wanted
from .errors import AutotuneError, ConfigError, describe_exception, redact
from .objective import CATCH, Objective

FINISHED = study_mod.FINISHED
# Trials that hold a slot of the budget: done, in flight, or queued (a retry, an enqueued trial).
ALIVE = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)
POLL_S = 0.5
WORKER_ATTR = orphans.OWNER_ATTR  # trial user attr: "host:pid:start" of the process that runs it
worker_id = orphans.owner_id


def _file(cfg: RunConfig) -> str:
    return Path(cfg.source).name


# ---------------------------------------------------------------- where each worker runs


@dataclass(frozen=True)
class Slot:
    """One worker process: its index, the GPUs it sees (CUDA_VISIBLE_DEVICES: one, or `devices` of them for a
    trial on several) or None, its CPU threads (split again over a trial's ranks)."""

    index: int
    gpu: str | None
    threads: int

    def env(self) -> dict[str, str]:
        env = {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads),
               "AUTOTUNE_WORKER_INDEX": str(self.index)}
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu
        return env

    def describe(self) -> str:
        where = f"GPU {self.gpu}" if self.gpu is not None else "CPU"
        return f"worker {self.index}: {where}, {self.threads} thread(s)"


def check_storage(cfg: RunConfig, n_workers: int, key: str = "study.storage") -> None:
    """SQLite serializes writers and fails them with "database is locked": refuse it for several workers."""
    url = cfg.study.storage
    if n_workers > 1 and url.startswith("sqlite"):
        name = cfg.study.name
        raise ConfigError(_file(cfg), key, f"SQLite cannot take {n_workers} concurrent workers ({url}); use "
                                           f"journal:///studies/{name}.log on one machine or "
                                           f"postgresql://USER:PASSWORD@HOST/DB (or mysql://...) across machines")


def plan(cfg: RunConfig, n_workers: int | None, gpus: list[str] | None) -> list[Slot]:
    """Which GPUs and how many threads each worker gets; a request that cannot be met is a ConfigError.

    A trial on several devices (`devices`, its largest searched value) takes that many GPUs: workers x devices
    never exceeds the GPUs visible, and two trials share a GPU only when --gpus repeats it; on the CPU, workers x
    devices processes never exceed the cores."""
    file = _file(cfg)
    if n_workers is not None and n_workers < 1:
        raise ConfigError(file, "--workers", f"must be >= 1; got {n_workers}")
    device = str(cfg.fixed()["device"])
    pinned = _cuda_index(device)
    cores = cpu_cores()
    per = devices_wanted(cfg)  # GPUs (or CPU processes) one trial takes
    if gpus is not None:
        if device in ("cpu", "mps"):
            raise ConfigError(file, "--gpus", f"train.device is {device}: GPUs would sit idle; drop --gpus or use "
                                              "device auto or cuda")
        if pinned is not None:
            raise ConfigError(file, "--gpus", f"train.device {device} already picks the GPU; drop --gpus, or use "
                                              "device cuda and pick GPUs with --gpus")
        bad = [g for g in gpus if not g.strip().isdigit()]
        if bad or not gpus:
            raise ConfigError(file, "--gpus", f"must be GPU indices like 0,1,2; got {','.join(gpus)!r}")
        n = n_workers or max(1, len(gpus) // per)
        if per == 1 and len(gpus) < n:
            raise ConfigError(file, "--gpus", f"{n} workers need {n} GPU indices, got {len(gpus)}: repeat an index "
                                              f"to put two workers on one GPU, e.g. 0,0,1,1")
        if len(gpus) < n * per:
            raise ConfigError(file, "--gpus", f"{n} workers x devices {per} need {n * per} GPU indices, got "
                                              f"{len(gpus)} (worker k takes the k-th group of {per}; repeat a group "
                                              "to put two workers' trials on the same GPUs)")
        visible = _visible_gpus()
        missing = [g for g in gpus[:n * per] if int(g) >= len(visible)]
        if missing:
            raise ConfigError(file, "--gpus", f"GPU {missing[0]} is not visible; {len(visible)} visible"
                                              + (f" ({', '.join(map(str, range(len(visible))))})" if visible else ""))
        groups = [[g.strip() for g in gpus[k * per:(k + 1) * per]] for k in range(n)]
        for k, group in enumerate(groups):
            twice = next((g for g in group if group.count(g) > 1), None)
            if twice is not None:  # NCCL refuses two ranks of one group on one GPU
                raise ConfigError(file, "--gpus", f"worker {k}'s trials would put two ranks on GPU {twice}: the "
                                                  f"devices {per} of a trial are distinct GPUs")
        chosen = [",".join(visible[int(g)] for g in group) for group in groups]
    elif pinned is not None:  # one worker on GPU N; it sees that GPU alone, as cuda:0 (worker_config)
        if per > 1:
            raise ConfigError(file, "train.device", f"{device} picks one GPU; with devices {per} use device cuda or "
                                                    "auto")
        n = n_workers or 1
        if n > 1:
            raise ConfigError(file, "train.device", f"{device} puts every worker on one GPU; use device cuda or auto "
                                                    "and pick GPUs with --gpus")
        visible = _visible_gpus()
        if pinned >= len(visible):
            raise ConfigError(file, "train.device", f"{device} is not visible; {len(visible)} CUDA GPU(s) visible")
        chosen = [visible[pinned]]
    elif device in ("cpu", "mps") or not _visible_gpus():
        n = n_workers or 1
        if per > 1 and n * per > cores:
            raise ConfigError(file, "--workers", f"{n} workers x devices {per} = {n * per} processes but {cores} CPU "
                                                 "core(s)")
        chosen = [None] * n
    else:
        visible = _visible_gpus()
        n = n_workers or max(1, len(visible) // per)
        if per == 1 and n > len(visible):
            raise ConfigError(file, "--workers", f"{n} workers but {len(visible)} GPU(s) visible, and two workers "
                                                 f"never share a GPU unless asked: give --gpus, e.g. "
                                                 f"{','.join(str(i % len(visible)) for i in range(n))}")
        if n * per > len(visible):
            raise ConfigError(file, "--workers", f"{n} workers x devices {per} need {n * per} GPUs but "
                                                 f"{len(visible)} visible, and two trials never share a GPU unless "
                                                 f"asked: give --gpus, e.g. "
                                                 f"{','.join(str(i % len(visible)) for i in range(n * per))}")
        chosen = [",".join(visible[k * per:(k + 1) * per]) for k in range(n)]
    check_storage(cfg, n)
    threads = max(1, cores // n)
    return [Slot(index=i, gpu=g, threads=threads) for i, g in enumerate(chosen)]


def _cuda_index(device: str) -> int | None:
    """N for `cuda:N`, else None."""
    kind, _, index = device.partition(":")
    return int(index) if kind == "cuda" and index.isdigit() else None


def worker_config(cfg_dict: dict[str, Any], slot: Slot) -> dict[str, Any]:
    """The config a worker pinned to one GPU runs: CUDA_VISIBLE_DEVICES leaves it that GPU alone, as cuda:0, so
    `device: cuda:N` (N the GPU's index for the driver) becomes cuda:0 there."""
    device = str(cfg_dict.get("train", {}).get("device", ""))
    if slot.gpu is None or _cuda_index(device) is None:
        return cfg_dict
    return {**cfg_dict, "train": {**cfg_dict["train"], "device": "cuda:0"}}


def _visible_gpus() -> list[str]:
    """Physical ids of the GPUs this process may use, honouring an outer CUDA_VISIBLE_DEVICES."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    outer = os.environ.get("CUDA_VISIBLE_DEVICES")
    if outer is not None and outer.strip():
        ids = [s.strip() for s in outer.split(",") if s.strip()]
        return ids[:count]
    return [str(i) for i in range(count)]


# ---------------------------------------------------------------- the budget


@dataclass(frozen=True)
class Counts:
    finished: int
    running: int
    waiting: int
    failed: int


def counts(trials: list[FrozenTrial]) -> Counts:
    by = {s: 0 for s in TrialState}
    for t in trials:
        by[t.state] += 1
    return Counts(finished=by[TrialState.COMPLETE] + by[TrialState.PRUNED], running=by[TrialState.RUNNING],
                  waiting=by[TrialState.WAITING], failed=by[TrialState.FAIL])


def claim(study: optuna.Study, number: int, n_trials: int) -> bool:
    """May trial `number` run? Only if fewer than n_trials trials numbered below it are alive.

    Every alive trial was created before it (numbers follow creation), so of any n_trials + 1 trials
    that finish, the highest-numbered one saw the others alive when it checked: it cannot have run.
    """
    ahead = sum(1 for t in study.get_trials(deepcopy=False, states=ALIVE) if t.number < number)
    return ahead < n_trials


class SurplusTrial(AutotuneError):
    """A trial that lost the race for the last slots: it fails at once, before sampling anything."""


class _SurplusLogFilter(logging.Filter):
    """Optuna logs every failed trial with a traceback; a surplus trial is bookkeeping, not an error."""

    def __init__(self) -> None:
        super().__init__()
        self.numbers: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(msg.startswith(f"Trial {n} failed") for n in self.numbers)


class ClaimedObjective:
    """The objective every worker runs: claim a budget slot, then train (the storage stamped the trial's owner)."""

    def __init__(self, inner: Callable[[optuna.Trial], Any], n_trials: int | None) -> None:
        self.inner = inner
        self.n_trials = n_trials
        self.surplus = 0
        self._filter = _SurplusLogFilter()
        logging.getLogger("optuna.study._optimize").addFilter(self._filter)

    def __call__(self, trial: optuna.Trial) -> Any:
        if self.n_trials is not None and not claim(trial.study, trial.number, self.n_trials):
            self.surplus += 1
            self._filter.numbers.add(trial.number)
            trial.set_user_attr("surplus", True)
            raise SurplusTrial(f"trial {trial.number}: the study's {self.n_trials} trials were already claimed")
        return self.inner(trial)


# ---------------------------------------------------------------- one worker


def next_step(study: optuna.Study, n_trials: int | None) -> str:
    """'run', 'wait' (the budget is in flight in workers that may still die) or 'done'."""
    orphans.reap(study)
    if n_trials is None:
        return "run"
    trials = study.get_trials(deepcopy=False)
    c = counts(trials)
    if c.finished >= n_trials:
        return "done"
    if c.waiting or c.finished + c.running < n_trials:
        return "run"
    if orphans.heartbeats(study):
        return "wait"
    # No heartbeats: only trials of live processes on this host can still be seen dying.
    mine = [t for t in trials if t.state == TrialState.RUNNING and (o := orphans.owner_of(t)) is not None and o.here()]
    return "wait" if mine else "done"


TrialCallback = Callable[[optuna.Study, FrozenTrial], None]


@dataclass
class WorkerResult:
    ran: int  # trials this worker started (surplus ones included)
    surplus: int
    study: optuna.Study


def run_worker(cfg: RunConfig, sampler_seed_offset: int | None = 0, callbacks: list[TrialCallback] | None = None,
               objective: Callable[[optuna.Trial], Any] | None = None,
               study: optuna.Study | None = None, track: bool = True) -> WorkerResult:
    """Run trials of an existing study until it holds n_trials finished ones (or the timeout passes).

    `sampler_seed_offset`: 0 keeps the study's seed (one worker reproduces a one-process run); k > 0
    gives worker k its own stream, so parallel workers do not propose the same first settings; None
    reseeds at random (a worker that joined from elsewhere).
    `track`: log this worker's trials to MLflow (`tracking.mlflow`); `--workers`' children do not,
    their driver does.
    """
    import warnings

    # fail_stale_trials and the retry callback are "experimental" since Optuna 2.8: say it once, in the docs.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if study is None:
        study = study_mod.open_study(cfg, create=False)
    if sampler_seed_offset is None:
        study.sampler.reseed_rng()
    elif sampler_seed_offset and cfg.study.seed is not None:
        seed = cfg.study.seed + 1_000_003 * sampler_seed_offset
        study.sampler = samplers.make_sampler(cfg, seed)
    cfg = study_mod.resolve_teacher(cfg, study._storage)
    n = cfg.study.n_trials
    claimed = ClaimedObjective(objective or Objective(cfg), n)
    tracker = tracking.open_tracker(cfg, study) if track else None
    # Callbacks see the trials this worker ran, not the ones that lost the race for a slot.
    cbs = [_unless_surplus(cb) for cb in [*(callbacks or []), *([tracker] if tracker else [])]]
    deadline = None if cfg.study.timeout is None else time.monotonic() + cfg.study.timeout
    ran = 0
    step = "run"
    with _StaleWatcher(study, cfg):
        while deadline is None or time.monotonic() < deadline:
            step = next_step(study, n)
            if step == "done":
                break
            if step == "wait":
                time.sleep(POLL_S)
                continue
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            # No gc_after_trial: the objective already collects after each trial (accel.release_memory).
            study.optimize(claimed, n_trials=1, timeout=left, callbacks=cbs, catch=(*CATCH, SurplusTrial))
            ran += 1
    if tracker is not None:  # the parent run ends with the study, not with one of its workers
        tracker.finish(study, "FINISHED" if step == "done" else None)
    return WorkerResult(ran=ran, surplus=claimed.surplus, study=study)


class _StaleWatcher:
    """Look for dead workers' trials while this one trains, not only between trials (Optuna's habit):
    a stale trial is failed and retried within grace_period + grace_period / 2, however long trials are."""

    def __init__(self, study: optuna.Study, cfg: RunConfig) -> None:
        import threading

        self.study = study
        grace = cfg.study.grace_period or 2 * (cfg.study.heartbeat_interval or 1)
        self.every = max(0.5, grace / 2) if orphans.heartbeats(study) else 2.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="autotune-stale-watcher", daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            try:
                orphans.reap(self.study)
            except Exception:  # a storage hiccup here must not kill the worker; the main loop checks too
                pass

    def __enter__(self) -> _StaleWatcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def _unless_surplus(cb: TrialCallback) -> TrialCallback:
    def call(study: optuna.Study, t: FrozenTrial) -> None:
        if not t.user_attrs.get("surplus"):
            cb(study, t)

    return call


# ---------------------------------------------------------------- worker processes on this machine


def _child(cfg_dict: dict[str, Any], source: str, slot: Slot) -> None:
    """Entry point of a spawned worker (its environment was set by the parent before the spawn)."""
    parent = os.getppid()
    _die_with_parent()
    # A terminated worker fails its trial through Optuna (KeyboardInterrupt) instead of leaving it RUNNING.
    signal.signal(signal.SIGTERM, _interrupt)
    _watch_parent(parent)
    import torch

    torch.set_num_threads(slot.threads)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg = from_dict(cfg_dict, source=source)
    try:
        run_worker(cfg, sampler_seed_offset=slot.index, track=False)  # the driver logs every trial once
    except KeyboardInterrupt:
        sys.exit(130)
    except AutotuneError as e:
        print(f"error: worker {slot.index}: {e}", file=sys.stderr)
        sys.exit(2)


def checked_in_child(cfg_dict: dict[str, Any], source: str, slot: Slot) -> str:
    """`study.preflight` and the distillation teacher, run in a spawned process pinned like `slot`: the checks
    that touch the device (precision, casts, the device's name) create a CUDA context, and one made in the
    driver would keep its memory for the whole study. Returns the device's name; the child's ConfigError or
    AutotuneError is raised here as the same one-line error."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    with _env(slot.env()):
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
        raise AutotuneError(f"the device check process (GPU {slot.gpu}) {_exit_text(p.exitcode)} before it answered")
    kind, *rest = answer
    if kind == "config":
        raise ConfigError(*rest)
    if kind != "ok":
        raise AutotuneError(f"device check: {rest[0]}")
    return str(rest[0])


def _preflight_child(cfg_dict: dict[str, Any], source: str, conn: Any) -> None:
    """Entry point of the spawned device check: ("ok", device name), ("config", file, key, message) or
    ("error", one line)."""
    _die_with_parent()
    from . import accel

    try:
        cfg = from_dict(cfg_dict, source=source)
        study_mod.preflight(cfg)
        study_mod.resolve_teacher(cfg)  # the teacher file exists before any worker needs it
        conn.send(("ok", accel.device_name(accel.resolve_device(str(cfg.fixed()["device"])))))
    except ConfigError as e:
        conn.send(("config", e.file, e.key_path, e.message))
    except AutotuneError as e:
        conn.send(("error", str(e)))
    except Exception as e:  # a user's factory or dataset raising: one line, not a traceback from a child
        conn.send(("error", describe_exception(e)))
    finally:
        conn.close()


EXIT_GRACE_S = 20.0  # a terminated worker still alive after this long is ended (see _exit_after)


def _interrupt(signum: int, frame: Any) -> None:
    _exit_after(EXIT_GRACE_S)
    raise KeyboardInterrupt


def _exit_after(seconds: float) -> None:
    """End this process in `seconds` if it has not exited by then. A KeyboardInterrupt raised at an unlucky
    instant (between a storage or logging lock's acquire and its release) can leave the worker waiting on
    that lock forever, with the driver gone: an immortal worker holding its trial RUNNING. Ended instead, its
    trial is an orphan of a dead process, which the next run fails and retries."""
    import threading

    timer = threading.Timer(seconds, os._exit, args=(128 + signal.SIGTERM,))
    timer.daemon = True
    timer.start()


def _watch_parent(parent: int) -> None:
    """Terminate this worker, as the parent-death signal would, once its driver is gone: seen every second,
    in case that signal was lost (or came before the handler was in place)."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        _exit_after(EXIT_GRACE_S)  # even if the handler below never gets to run
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="autotune-parent-watch", daemon=True).start()


def _die_with_parent() -> None:
    """Linux: SIGTERM this worker when the driver dies, even by SIGKILL (no orphans training on)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


@contextlib.contextmanager
def _env(extra: dict[str, str]) -> Iterator[None]:
    """A spawned child inherits os.environ at start: set the slot's variables just for that moment."""
    old = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def run_parallel(cfg: RunConfig, slots: list[Slot], fresh: bool = False,
                 on_start: Callable[[optuna.Study, int], None] | None = None,
                 on_trial: TrialCallback | None = None, on_note: Callable[[str], None] | None = None,
                 poll_s: float = POLL_S) -> study_mod.TuneResult:
    """Create or resume the study, run one spawned worker per slot, show finished trials as they land."""
    import multiprocessing as mp

    note = on_note or (lambda s: print(s, file=sys.stderr))
    check_storage(cfg, len(slots))
    cfg_dict = cfg.to_dict()
    device = None
    if any(slot.gpu is not None for slot in slots):
        # The driver only watches: a CUDA context of its own would hold GPU memory all study long.
        device = checked_in_child(worker_config(cfg_dict, slots[0]), cfg.source, slots[0])
    else:
        study_mod.preflight(cfg)
        study_mod.resolve_teacher(cfg)  # the teacher file exists before any worker needs it
    tracking.check(cfg)
    study = study_mod.open_study(cfg, fresh=fresh, device_name=device)
    study_mod.note_orphans(orphans.reap(study), note)  # what a killed earlier run left RUNNING
    # The driver logs to MLflow, not the workers: it sees every trial finish (below), so each is logged
    # exactly once, over one client, with one warning if the server fails; workers never import MLflow.
    tracker = tracking.open_tracker(cfg, study)
    n = cfg.study.n_trials
    shown = {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
    todo = -1 if n is None else max(0, n - counts(study.get_trials(deepcopy=False)).finished)
    if on_start is not None:
        on_start(study, todo)
    if todo == 0:
        if tracker is not None:
            tracker.finish(study)
        return study_mod.TuneResult(study=study, config=cfg)
    ctx = mp.get_context("spawn")
    procs: list[tuple[Slot, Any]] = []
    for slot in slots:
        with _env(slot.env()):
            p = ctx.Process(target=_child, args=(worker_config(cfg_dict, slot), cfg.source, slot),
                            name=f"autotune-worker-{slot.index}")
            p.start()
        procs.append((slot, p))
    reported: set[int] = set()

    def show_new() -> None:
        for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
            if t.state.is_finished() and t.number not in shown:
                shown.add(t.number)
                if t.user_attrs.get("surplus"):
                    continue  # a lost race, not a trial anyone ran
                if on_trial is not None:
                    on_trial(study, t)
                if tracker is not None:
                    tracker(study, t)

    try:
        while any(p.is_alive() for _, p in procs):
            show_new()
            for slot, p in procs:
                if not p.is_alive() and p.pid not in reported and p.exitcode not in (0, None):
                    reported.add(p.pid)
                    note(f"worker {slot.index} (pid {p.pid}) {_exit_text(p.exitcode)}; the others carry on")
            time.sleep(poll_s)
    except KeyboardInterrupt:
        for _, p in procs:  # Ctrl-C reached them too; a SIGTERM fails their trials through Optuna
            if p.is_alive():
                p.terminate()
        for _, p in procs:
            p.join(timeout=30)
        if tracker is not None:
            show_new()  # the trials the workers failed on their way out
            tracker.finish(study, "KILLED")
        raise
    for _, p in procs:
        p.join()
    show_new()
    for slot, p in procs:
        if p.exitcode not in (0, None) and p.pid not in reported:
            note(f"worker {slot.index} (pid {p.pid}) {_exit_text(p.exitcode)}")
    surplus = sum(1 for t in study.get_trials(deepcopy=False) if t.user_attrs.get("surplus"))
    if surplus:
        note(f"{surplus} FAIL trial(s) marked surplus: workers raced for the last slots and these never ran")
    left = None if n is None else n - counts(study.get_trials(deepcopy=False)).finished
    if tracker is not None:
        tracker.finish(study, "FAILED" if left and cfg.study.timeout is None else "FINISHED")
    if left and cfg.study.timeout is None:
        raise AutotuneError(f"every worker stopped and the study holds {n - left} of its {n} finished trials: see the "
                            f"workers' errors above; run again to resume")
    return study_mod.TuneResult(study=study, config=cfg)


# ---------------------------------------------------------------- joining from anywhere


def join_config(storage_url: str, study_name: str) -> RunConfig:
    """The RunConfig a study was started with (its `config` user attr), pointed at `storage_url`."""
    file = "--storage"
    if storage_url.startswith("sqlite"):
        raise ConfigError(file, "--storage", f"SQLite cannot be shared by workers ({storage_url}); use "
                                             "journal:///path on one machine or postgresql://USER:PASSWORD@HOST/DB "
                                             "(or mysql://...) across machines")
    probe = from_dict({"study": {"storage": storage_url, "name": study_name}}, source=file)
    storage = study_mod.make_storage(probe)
    names = sorted(s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False))
    if study_name not in names:
        raise ConfigError(file, "--study", f"no study {study_name!r} in {redact(storage_url)}; known: "
                                           f"{', '.join(names) or 'none'}")
    attrs = optuna.load_study(study_name=study_name, storage=storage).user_attrs
    if "config" not in attrs:
        raise ConfigError(file, "--study", f"study {study_name!r} was not created by autotune (no config attr)")
    return from_dict(attrs["config"], overrides={"study.storage": storage_url, "study.name": study_name},
                     source=attrs.get("source", "<config>"))


def version_notes(study: optuna.Study) -> list[str]:
    """Differences between the study's recorded versions and this process's (results may not compare)."""
    stored = study.user_attrs.get("versions") or {}
    here = study_mod.versions()
    return [f"{k} {stored[k]} in the study, {here[k]} here" for k in ("autotune", "torch", "optuna")
            if k in stored and stored[k] != here.get(k)]


__all__ = ["ALIVE", "ClaimedObjective", "Counts", "Slot", "SurplusTrial", "WorkerResult", "check_storage",
           "checked_in_child", "claim", "counts", "join_config", "next_step", "plan", "run_parallel",
           "run_worker", "worker_config", "worker_id"]
