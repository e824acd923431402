"""Many workers on one study: processes on this machine (one GPU or a share of the cores each) or
`autotune worker` on any machine, all sharing the study through its storage. Where each worker runs (`slots_for`,
`place`), one worker's loop (`run_worker`), the spawned processes of `autotune run --workers` and their driver
(`run_parallel`), and joining a study from anywhere (`join`). The rules that keep a shared study's budget
exact and its stale trials retried are budget.py's.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.config import from_dict
from autotune.core import (
    ConfigError,
    contention,
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


def slots_for(cfg: RunConfig, n_workers: int | None, gpus: list[str] | None) -> list[Slot]:
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
    Pure: `slots_for` gives it what this machine has."""
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


__all__ = ["Slot", "WorkerResult", "fail_stale", "join", "join_config", "place", "run_worker", "slots_for",
           "worker_config", "worker_id"]
