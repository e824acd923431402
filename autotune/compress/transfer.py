"""Transfer learning and distillation: warm starts from a checkpoint (`model.checkpoint`), frozen layers
(`freeze`), the distillation teacher and its loss (`distill`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from autotune.core import ConfigError, lookup, resolve_path
from autotune.spec import DistillConfig, ModelConfig
from autotune.training import models


def load_checkpoint(model: nn.Module, path: str, source: str = "<config>", freeze: str = "none",
                    key: str = "model.checkpoint") -> None:
    """Warm-start `model` from a saved state dict; every missing, unexpected or mis-shaped key is named."""
    file = Path(source).name
    p = resolve_path(path, source)
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
        raise ConfigError(file, key, f"cannot read {path} as a state dict: {type(e).__name__}: "
                                                    f"{first}") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(file, key, f"{path} is not a state dict (a mapping of names to tensors)")
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shape = [f"{k} (checkpoint {list(state[k].shape)}, model {list(own[k].shape)})" for k in own
             if k in state and state[k].shape != own[k].shape]
    problems = []
    if missing:
        problems.append("missing " + ", ".join(missing))
    if unexpected:
        problems.append("unexpected " + ", ".join(unexpected))
    if shape:
        problems.append("shape mismatch " + ", ".join(shape))
    if problems:
        raise ConfigError(file, key, f"{path} does not fit the model: " + "; ".join(problems))
    model.load_state_dict(state)
    apply_freeze(model, freeze, file)


def _freeze_nothing(model: nn.Module, file: str) -> list[nn.Module]:
    return []


def _features(model: nn.Module, file: str) -> list[nn.Module]:
    kinds = (nn.modules.conv._ConvNd, nn.modules.batchnorm._BatchNorm)
    frozen = [m for m in model.modules() if isinstance(m, kinds)]
    if not frozen:
        raise ConfigError(file, "freeze", "features: the model has no conv or batch-norm layers; use all_but_head")
    return frozen


def _all_but_head(model: nn.Module, file: str) -> list[nn.Module]:
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ConfigError(file, "freeze", "all_but_head: the model has no Linear head")
    head = linears[-1]
    return [m for m in model.modules() if m is not head and not list(m.children())]


# The freeze registry: name -> (model, file) -> the layers kept fixed; the catalogue's freeze names are its keys.
FREEZERS: dict[str, Callable[[nn.Module, str], list[nn.Module]]] = {
    "none": _freeze_nothing, "features": _features, "all_but_head": _all_but_head,
}


def apply_freeze(model: nn.Module, freeze: str, file: str = "<config>") -> None:
    """`features`: conv and batch-norm layers; `all_but_head`: everything but the last Linear."""
    frozen = lookup(FREEZERS, freeze, file, "freeze", "freeze")(model, file)
    for m in frozen:
        for p in m.parameters(recurse=False):
            p.requires_grad_(False)
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.momentum = 0.0  # frozen running statistics too: momentum 0 keeps them as loaded


def load_teacher(distill: DistillConfig, student: ModelConfig, input_shape: tuple[int, ...], n_classes: int,
                 dev: torch.device, source: str = "<config>", channels_last: bool = False) -> nn.Module:
    """The distillation teacher: `teacher_model` (default: the student's section) loaded from `teacher`, frozen."""
    file = Path(source).name
    arch = (distill.teacher_model or student).model_copy(update={"checkpoint": None})
    teacher = models.build(arch, input_shape, n_classes, 0.0, "default", file)
    load_checkpoint(teacher, distill.teacher, source, "none", key="distill.teacher")
    teacher = teacher.to(dev).eval()
    if channels_last:
        teacher = teacher.to(memory_format=torch.channels_last)
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def distill_loss(label_loss: torch.Tensor, logits: torch.Tensor, teacher: nn.Module, xb: torch.Tensor,
                 distill: DistillConfig) -> torch.Tensor:
    """(1 - alpha) x label loss + alpha x T^2 x KL(teacher || student) at temperature T (Hinton et al.)."""
    t = distill.temperature
    with torch.no_grad():
        soft = nn.functional.softmax(teacher(xb).float() / t, dim=1)
    kd = nn.functional.kl_div(nn.functional.log_softmax(logits / t, dim=1), soft, reduction="batchmean") * t * t
    return (1 - distill.alpha) * label_loss + distill.alpha * kd
