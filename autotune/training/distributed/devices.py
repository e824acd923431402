"""Several devices per trial: one trial trains over N processes with torch.distributed and DistributedDataParallel.

The process that runs the trial (the study's worker) never joins the process group. It starts N ranks (forkserver
processes: torch and autotune are imported once per worker, not once per trial), hosts their TCPStore, and watches
them; rank 0 is its only link to the study, as in Optuna's TorchDistributedTrial: rank 0 sends each epoch's record
and gets the study's verdict (pruned or not), then broadcasts every stop decision to the other ranks, so all stop
at the same step. A rank that dies or raises is seen at once (its pipe and its process sentinel): the launcher
kills the others, which may be blocked in a collective, and the trial fails with the first rank's own error.

    NCCL on CUDA (rank r on cuda:r of the GPUs the worker sees), gloo on the CPU (loopback, 1/N of the threads each).

The launcher and the ranks' processes are supervisor.py; a rank's `Group` and `ShardedBatches` are group.py; this
module checks what a study asks for.

The trial context (context/trial.py) holds a `Group` and does the rest: DDP around the model, each rank's share of every
global batch (`ShardedBatches`), reduced sample counts and losses, clocks after a barrier.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

from autotune.core import ConfigError
from autotune.training.distributed.group import Group, ShardedBatches, backend_for
from autotune.training.distributed.supervisor import RankFailed, launch

if TYPE_CHECKING:
    from autotune.spec import RunConfig


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# ---------------------------------------------------------------- what a study may ask for


def devices_wanted(cfg: RunConfig) -> int:
    """The most devices one trial of this config may use (the fixed value, or the largest searched one)."""
    spec = cfg.space.get("devices")
    if spec is None:
        return int(cfg.fixed()["devices"])
    if spec.choices is not None:
        return max(int(c) for c in spec.choices)
    assert spec.high is not None
    return int(spec.high)


def check(cfg: RunConfig) -> None:
    """`devices` this machine cannot give, as a ConfigError before anything runs (part of fit.preflight)."""
    from autotune.training import accel

    n = devices_wanted(cfg)
    if n <= 1:
        return
    file = cfg.file
    key = "space.devices" if "devices" in cfg.space else "train.devices"
    fixed = cfg.fixed()
    device = str(fixed["device"])
    if not torch.distributed.is_available():
        raise ConfigError(file, key, f"devices {n} needs torch.distributed, which this torch build lacks")
    dev = accel.resolve_device(device)
    if dev.type == "mps":
        raise ConfigError(file, key, f"devices {n} runs on CUDA GPUs (NCCL) or the CPU (gloo), not on mps; set "
                                     "train.device: cpu or devices: 1")
    if dev.type == "cuda":
        if dev.index is not None:
            raise ConfigError(file, "train.device", f"{device} picks one GPU; with devices {n} use device cuda or "
                                                    f"auto (a trial's ranks take cuda:0..cuda:{n - 1} of the GPUs "
                                                    "visible)")
        visible = torch.cuda.device_count()
        if n > visible:
            raise ConfigError(file, key, f"devices {n} but {visible} CUDA GPU(s) visible: one process per GPU")
        if not torch.distributed.is_nccl_available():
            raise ConfigError(file, key, f"devices {n} on CUDA needs NCCL, which this torch build lacks")
    else:
        cores = cpu_cores()
        if n > cores:
            raise ConfigError(file, key, f"devices {n} on the CPU but {cores} core(s): one process per core at least")
        if not torch.distributed.is_gloo_available():
            raise ConfigError(file, key, f"devices {n} on the CPU needs gloo, which this torch build lacks")
    if "batch_size" not in cfg.space and "devices" not in cfg.space and int(fixed["batch_size"]) < n:
        raise ConfigError(file, "train.batch_size", f"{fixed['batch_size']} cannot be split over devices {n}: "
                                                    "batch_size is the global batch, at least one sample per device")


__all__ = ["Group", "RankFailed", "ShardedBatches", "backend_for", "check", "cpu_cores", "devices_wanted", "launch"]
