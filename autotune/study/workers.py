"""Many workers on one study: processes on this machine (one GPU or a share of the cores each) or
`autotune worker` on any machine, all sharing the study through its storage. Where each worker runs (`plan`,
`place`), one worker's loop (`run_worker`), the spawned processes of `autotune run --workers` and their driver
(`run_parallel`), and joining a study from anywhere (`join`). The rules that keep a shared study's budget
exact and its stale trials retried are budget.py's.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.config import from_dict
from autotune.core import (
    AutotuneError,
    ConfigError,
    ConfigWarning,
    config_warnings_as_lines,
    contention,
    describe_exception,
    environ,
    lifetime,
    without_user_code,
)
from autotune.core import optuna_compat as compat
from autotune.search import samplers
from autotune.spec import RunConfig
from autotune.study import orphans, storage
from autotune.study import runner as study_mod
from autotune.study import trust as trust_mod
from autotune.study.budget import (
    ClaimedObjective,
    StaleWatcher,
    SurplusTrial,
    TrialCallback,
    batch,
    counts,
    is_surplus,
    next_step,
    unless_surplus,
)
from autotune.study.objective import Objective, interrupted, watching
from autotune.study.outcome import CATCH, quiet_failures
from autotune.training import accel, cpu_cores, devices_wanted

FINISHED = study_mod.FINISHED
POLL_S = 0.5
WORKER_ATTR = orphans.OWNER_ATTR  # trial user attr: "host:pid:start" of the process that runs it
worker_id = orphans.owner_id


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


def plan(cfg: RunConfig, n_workers: int | None, gpus: list[str] | None) -> list[Slot]:
    """Which GPUs and how many threads each worker gets; a request that cannot be met is a ConfigError.

    A trial on several devices (`devices`, its largest searched value) takes that many GPUs: workers x devices
    never exceeds the GPUs visible, and two trials share a GPU only when --gpus repeats it; on the CPU, workers x
    devices processes never exceed the cores."""
    file = cfg.file
    if n_workers is not None and n_workers < 1:
        raise ConfigError(file, "--workers", f"must be >= 1; got {n_workers}")
    device = str(cfg.fixed()["device"])
    cores = cpu_cores()
    visible = [] if device in ("cpu", "mps") else visible_gpus()
    chosen = place(file, device, n_workers, gpus, devices_wanted(cfg), visible, cores)
    storage.check_shared(cfg, len(chosen))
    threads = contention.default_threads(len(chosen), n_cores=cores)
    return [Slot(index=i, gpu=g, threads=threads) for i, g in enumerate(chosen)]


def place(file: str, device: str, n_workers: int | None, gpus: list[str] | None, per: int, visible: list[str],
          cores: int) -> list[str | None]:
    """Each worker's CUDA_VISIBLE_DEVICES (None: the CPU), from the physical ids of the `visible` GPUs: `per`
    distinct GPUs per worker (one trial's devices), never one GPU for two workers unless `gpus` repeats it.
    Pure: `plan` gives it what this machine has."""
    pinned = _cuda_index(device)
    if gpus is not None:
        return _place_listed(file, device, pinned, n_workers, gpus, per, visible)
    if pinned is not None:  # one worker on GPU N; it sees that GPU alone, as cuda:0 (worker_config)
        return _place_pinned(file, device, pinned, n_workers, per, visible)
    if device in ("cpu", "mps") or not visible:
        n = n_workers or 1
        if per > 1 and n * per > cores:
            raise ConfigError(file, "--workers", f"{n} workers x devices {per} = {n * per} processes but {cores} CPU "
                                                 "core(s)")
        return [None] * n
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
    return [",".join(visible[k * per:(k + 1) * per]) for k in range(n)]


def _place_listed(file: str, device: str, pinned: int | None, n_workers: int | None, gpus: list[str], per: int,
                  visible: list[str]) -> list[str | None]:
    """--gpus: worker k takes the k-th group of `per` indices into the visible GPUs."""
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
    return [",".join(visible[int(g)] for g in group) for group in groups]


def _place_pinned(file: str, device: str, pinned: int, n_workers: int | None, per: int,
                  visible: list[str]) -> list[str | None]:
    """`device: cuda:N`: one worker, on the N-th visible GPU."""
    if per > 1:
        raise ConfigError(file, "train.device", f"{device} picks one GPU; with devices {per} use device cuda or "
                                                "auto")
    if (n_workers or 1) > 1:
        raise ConfigError(file, "train.device", f"{device} puts every worker on one GPU; use device cuda or auto "
                                                "and pick GPUs with --gpus")
    if pinned >= len(visible):
        raise ConfigError(file, "train.device", f"{device} is not visible; {len(visible)} CUDA GPU(s) visible")
    return [visible[pinned]]


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


def visible_gpus() -> list[str]:
    """Physical ids of the GPUs this process may use, honouring an outer CUDA_VISIBLE_DEVICES."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    outer = os.environ.get("CUDA_VISIBLE_DEVICES")
    if outer is not None and outer.strip():
        ids = [s.strip() for s in outer.split(",") if s.strip()]
        return ids[:count]
    return [str(i) for i in range(count)]


# ---------------------------------------------------------------- one worker


@dataclass
class WorkerResult:
    ran: int  # trials this worker started (surplus ones included)
    surplus: int
    study: optuna.Study


def run_worker(cfg: RunConfig, sampler_seed_offset: int | None = 0, callbacks: list[TrialCallback] | None = None,
               objective: Callable[[optuna.Trial], Any] | None = None,
               study: optuna.Study | None = None) -> WorkerResult:
    """Run trials of an existing study until it holds n_trials finished ones (or the timeout passes).

    `sampler_seed_offset`: 0 keeps the study's seed (one worker reproduces a one-process run); k > 0
    gives worker k its own stream, so parallel workers do not propose the same first settings; None
    reseeds at random (a worker that joined from elsewhere).
    `callbacks`: trial callbacks for this worker's trials; a `RunCallback` (MLflow's tracker) starts once the study
    is open and finishes as the worker leaves (ending the parent run only when the study is done). `--workers`'
    children get none: their driver logs.
    """
    import warnings

    if study is None:
        study = study_mod.open_study(cfg, create=False)
    if sampler_seed_offset is None:
        study.sampler.reseed_rng()
    elif sampler_seed_offset and cfg.study.seed is not None:
        seed = cfg.study.seed + 1_000_003 * sampler_seed_offset
        study.sampler = samplers.make_sampler(cfg, seed)
    cfg = study_mod.resolve_teacher(cfg, compat.storage_of(study))
    n = cfg.study.n_trials
    claimed = ClaimedObjective(objective or Objective(cfg), n)
    hooks = study_mod.start_run(callbacks, study)
    # Callbacks see the trials this worker ran, not the ones that lost the race for a slot.
    cbs = [unless_surplus(cb) for cb in callbacks or []]
    deadline = None if cfg.study.timeout is None else time.monotonic() + cfg.study.timeout
    step = "run"
    with warnings.catch_warnings(), StaleWatcher(study, cfg), quiet_failures(), claimed.quiet(), \
            accel.frozen_survivors(), watching(claimed, cfg.study.timeout, study):
        # fail_stale_trials and the retry callback are "experimental" since Optuna 2.8: said once, in the docs.
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        while deadline is None or time.monotonic() < deadline:
            if interrupted(claimed):  # Ctrl-C or SIGTERM, in a trial or while waiting: no next batch (watching
                break  # raises KeyboardInterrupt)
            step = next_step(study, n, claimed)
            if step == "done":
                break
            if step == "wait":
                time.sleep(POLL_S)
                continue
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            # No gc_after_trial: the objective already collects after each trial (accel.release_memory).
            # callbacks=None without the caller's: Optuna then reads no trial back for them (a full read per trial)
            study.optimize(claimed, n_trials=batch(claimed.seen, n), timeout=left, catch=(*CATCH, SurplusTrial),
                           callbacks=cbs or None)
    # the parent run ends with the study, not with one of its workers
    study_mod.finish_run(hooks, study, "FINISHED" if step == "done" else None)
    return WorkerResult(ran=claimed.ran, surplus=claimed.surplus, study=study)


# ---------------------------------------------------------------- worker processes on this machine


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

    def terminate(self) -> None:
        for _, p in self.procs:  # Ctrl-C reached them too; a SIGTERM fails their trials through Optuna
            if p.is_alive():
                p.terminate()
        for _, p in self.procs:
            p.join(timeout=30)


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
        pool.terminate()
        if hooks:
            feed()  # the trials the workers failed on their way out
            study_mod.finish_run(hooks, study, "KILLED")
        raise
    pool.join()
    feed()
    pool.tell_exits(note)
    _wrap_up(cfg, study, hooks, note)
    return study


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


# ---------------------------------------------------------------- joining from anywhere


def join_config(storage_url: str, study_name: str, code_hash: str | None = None, trust: bool = False) -> RunConfig:
    """The RunConfig a study was started with (its `config` user attr), pointed at `storage_url`. The code it names
    is imported only once the stored config is known to be the one launched (`code_hash`), or trusted (trust.py)."""
    storage.check_joinable(storage_url)
    with without_user_code():  # read once and validated, nothing of it imported yet
        study, record = storage.read_stored(storage_url, study_name)
        storage.config_of(study, record, storage_url)
    trust_mod.check(study.study_name, record.config, storage.stored_source(record), code_hash, trust, storage_url)
    return storage.config_of(study, record, storage_url)  # the bytes checked, not a second read


def join(storage_url: str, study_name: str, n_trials: int | None = None, timeout: float | None = None,
         code_hash: str | None = None, trust: bool = False) -> tuple[RunConfig, optuna.Study]:
    """`autotune worker`: the study's config (with this worker's budget and timeout), checked on this machine
    (its data, factories and device: one line now, not a failure in every trial), and the study."""
    cfg = join_config(storage_url, study_name, code_hash, trust)
    if n_trials is not None or timeout is not None:
        over = {k: v for k, v in (("study.n_trials", n_trials), ("study.timeout", timeout)) if v is not None}
        cfg = from_dict(cfg.to_dict(), overrides=over, source=cfg.source)
    storage.check_shared(cfg, 2, key="--storage")  # a joining worker is never alone
    study_mod.preflight(cfg)
    return cfg, study_mod.open_study(cfg, create=False)


def fail_stale(cfg: RunConfig) -> list[int]:
    """`--fail-stale`: fail (and queue one retry of) every RUNNING trial, wherever its owner ran: for a journal
    study whose workers were all killed, where no heartbeat tells."""
    return orphans.reap(study_mod.open_study(cfg, create=False), everywhere=True)


__all__ = ["Slot", "WorkerResult", "checked_in_child", "fail_stale", "join", "join_config", "place", "plan",
           "run_parallel", "run_worker", "worker_config", "worker_id"]
