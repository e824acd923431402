"""The optimizer and learning-rate schedule registries: `optimizer` / `lr_schedule` name -> builder.

The settings catalogue's allowed names for both are these mappings' keys (settings.py asks here); the
trial context builds from them (`make_optimizer`, `SCHEDULES`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from autotune.core import lookup
from autotune.spec import Settings


def _sgd(params: Any, s: Settings, fast: dict[str, Any]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=s["lr"], momentum=s["momentum"], weight_decay=s["weight_decay"], **fast)


def _sgd_nesterov(params: Any, s: Settings, fast: dict[str, Any]) -> torch.optim.Optimizer:
    mom = s["momentum"]  # Nesterov needs momentum > 0: with 0 it is plain SGD
    return torch.optim.SGD(params, lr=s["lr"], momentum=mom, nesterov=mom > 0, weight_decay=s["weight_decay"], **fast)


def _adam(params: Any, s: Settings, fast: dict[str, Any]) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=s["lr"], weight_decay=s["weight_decay"], **fast)


def _adamw(params: Any, s: Settings, fast: dict[str, Any]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=s["lr"], weight_decay=s["weight_decay"], **fast)


def _rmsprop(params: Any, s: Settings, fast: dict[str, Any]) -> torch.optim.Optimizer:
    return torch.optim.RMSprop(params, lr=s["lr"], momentum=s["momentum"], weight_decay=s["weight_decay"],
                               foreach=fast.get("foreach"))


OPTIMIZERS: dict[str, Callable[[Any, Settings, dict[str, Any]], torch.optim.Optimizer]] = {
    "sgd": _sgd, "sgd_nesterov": _sgd_nesterov, "adam": _adam, "adamw": _adamw, "rmsprop": _rmsprop,
}
FUSED = ("sgd", "sgd_nesterov", "adam", "adamw")  # torch has fused kernels for these (CUDA; also CPU since 2.4)


def fast_kwargs(name: str, dev: torch.device, fused: bool = True) -> dict[str, Any]:
    """Fused kernels (one launch for the whole update) where torch has them for this optimizer and device,
    else foreach (one launch per parameter group) off the CPU; the CPU foreach path is slower than a loop.
    `fused` False: never fused (a fused optimizer unscales inside its step, and Lightning's mixed-precision plugin
    refuses to clip its gradients)."""
    if fused and name in FUSED and dev.type in ("cuda", "cpu"):
        return {"fused": True}
    return {"foreach": True} if dev.type != "cpu" else {}


def make_optimizer(name: str, params: Any, settings: Settings, dev: torch.device,
                   fused: bool = True) -> torch.optim.Optimizer:
    """The optimizer `name` over `params`, with lr, momentum, weight_decay from the settings and the fastest
    kernels torch has for it on `dev` (`fused` False: no fused kernels)."""
    return lookup(OPTIMIZERS, name, None, "optimizer", "optimizer")(params, settings, fast_kwargs(name, dev, fused))


# A schedule scales each parameter group's own lr over `total` steps (the groups' ratios hold): the searched lr
# with the built-in optimizer, the groups' own lrs (times a searched lr) with an optimizer a fit built.


def _cosine(opt: torch.optim.Optimizer, total: int) -> torch.optim.lr_scheduler.LRScheduler:
    return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, total))


def _onecycle(opt: torch.optim.Optimizer, total: int) -> torch.optim.lr_scheduler.LRScheduler:
    # cycle_momentum off: the searched momentum (or Adam's betas) stays as sampled, and optimizers without one
    # (Adadelta, a user's own) take the schedule too
    return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[float(g["lr"]) for g in opt.param_groups],
                                               total_steps=max(2, total), cycle_momentum=False)


SCHEDULES: dict[str, Callable[[torch.optim.Optimizer, int], torch.optim.lr_scheduler.LRScheduler] | None] = {
    "constant": None, "cosine": _cosine, "onecycle": _onecycle,
}
