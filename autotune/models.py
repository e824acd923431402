"""Model builders (`cnn`, `mlp`, a user factory) and weight-initialization schemes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .config import ModelConfig, load_factory
from .data import factory_kwargs
from .errors import ConfigError


def cnn(input_shape: tuple[int, ...], n_classes: int, channels: tuple[int, ...] = (32, 64), hidden: int = 128,
        dropout: float = 0.0) -> nn.Module:
    """Conv-BN-ReLU blocks, each halving the image while it is at least 2 pixels, then an MLP head."""
    if len(input_shape) != 3:
        raise ConfigError(None, "model.name", f"cnn needs image inputs (C, H, W); got shape {input_shape}: use mlp")
    c, h, w = input_shape
    layers: list[nn.Module] = []
    for out in channels:
        layers += [nn.Conv2d(c, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
        if min(h, w) >= 2:
            layers.append(nn.MaxPool2d(2))
            h, w = h // 2, w // 2
        c = out
    head = [nn.Flatten(), nn.Linear(c * h * w, hidden), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(hidden, n_classes)]
    return nn.Sequential(*layers, *head)


def mlp(input_shape: tuple[int, ...], n_classes: int, hidden: int = 128, depth: int = 2,
        dropout: float = 0.0) -> nn.Module:
    """`depth` hidden layers of width `hidden` on the flattened input."""
    n_in = math.prod(input_shape)
    layers: list[nn.Module] = [nn.Flatten()]
    for _ in range(depth):
        layers += [nn.Linear(n_in, hidden), nn.ReLU(inplace=True), nn.Dropout(dropout)]
        n_in = hidden
    layers.append(nn.Linear(n_in, n_classes))
    return nn.Sequential(*layers)


MODELS: dict[str, Callable[..., nn.Module]] = {"cnn": cnn, "mlp": mlp}


def _xavier_uniform(w: torch.Tensor) -> None:
    nn.init.xavier_uniform_(w)


def _xavier_normal(w: torch.Tensor) -> None:
    nn.init.xavier_normal_(w)


def _kaiming_uniform(w: torch.Tensor) -> None:
    nn.init.kaiming_uniform_(w, nonlinearity="relu")


def _kaiming_normal(w: torch.Tensor) -> None:
    nn.init.kaiming_normal_(w, nonlinearity="relu")


def _orthogonal(w: torch.Tensor) -> None:
    nn.init.orthogonal_(w)


INITS: dict[str, Callable[[torch.Tensor], None] | None] = {
    "default": None,  # PyTorch's own per-layer defaults
    "xavier_uniform": _xavier_uniform,
    "xavier_normal": _xavier_normal,
    "kaiming_uniform": _kaiming_uniform,
    "kaiming_normal": _kaiming_normal,
    "orthogonal": _orthogonal,
}


def init_weights(model: nn.Module, scheme: str) -> None:
    """Re-initialize every conv and linear weight with `scheme`; biases to zero."""
    if scheme not in INITS:
        raise ConfigError(None, "init", f"unknown init {scheme!r}; allowed: {', '.join(sorted(INITS))}")
    fn = INITS[scheme]
    if fn is None:
        return
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)):
                fn(m.weight)
                if m.bias is not None:
                    m.bias.zero_()


def build(cfg: ModelConfig, input_shape: tuple[int, ...], n_classes: int, dropout: float, init: str,
          file: str = "<config>") -> nn.Module:
    """The model a config names, initialized with `init`."""
    if cfg.factory is not None:
        fn = load_factory(cfg.factory, file, "model.factory")
        offered: dict[str, Any] = {"input_shape": input_shape, "n_classes": n_classes, "dropout": dropout,
                                   **cfg.kwargs}
        model = fn(**factory_kwargs(fn, offered))
        if not isinstance(model, nn.Module):
            raise ConfigError(file, "model.factory", f"must return a torch.nn.Module; got {type(model).__name__}")
    elif cfg.name == "cnn":
        model = cnn(input_shape, n_classes, tuple(cfg.channels), cfg.hidden, dropout, **cfg.kwargs)
    else:
        model = mlp(input_shape, n_classes, cfg.hidden, dropout=dropout, **cfg.kwargs)
    init_weights(model, init)
    return model
