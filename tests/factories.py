"""User-style factories referenced from test configs as 'tests.factories:NAME'."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def small_net(input_shape: tuple[int, ...], n_classes: int, width: int = 16) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), width), nn.ReLU(),
                         nn.Linear(width, n_classes))


class _OOMAbove(nn.Module):
    """Raises the error a real CUDA out-of-memory raises once a batch is larger than `limit`."""

    def __init__(self, inner: nn.Module, limit: int) -> None:
        super().__init__()
        self.inner = inner
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {x.shape[0]} MiB (test)")
        return self.inner(x)


def oom_above_64(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    return _OOMAbove(small_net(input_shape, n_classes), 64)


def blobs(n: int = 300, n_features: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, n)
    x = rng.normal(size=(n, n_features)).astype(np.float32) + y[:, None] * 2.0
    return x, y


def not_a_module(input_shape: tuple[int, ...], n_classes: int) -> object:
    return "nope"


PROBE: list[dict] = []  # what the probe model saw during its last training run


class _Probe(nn.Module):
    """A small CNN that records the dtype, memory format and compile state it runs under."""

    def __init__(self, input_shape: tuple[int, ...], n_classes: int) -> None:
        super().__init__()
        c = input_shape[0]
        self.conv = nn.Conv2d(c, 8, 3, padding=1)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8 * input_shape[1] * input_shape[2], n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        if self.training:
            PROBE.append({
                "conv_dtype": h.dtype,
                "channels_last": x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous(),
                "compiling": torch.compiler.is_compiling(),
            })
        return self.head(torch.relu(h))


def probe(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    PROBE.clear()
    return _Probe(input_shape, n_classes)


class _Sleepy(nn.Module):
    """Stands in for a hung input pipeline or kernel: each training batch takes `seconds`."""

    def __init__(self, inner: nn.Module, seconds: float) -> None:
        super().__init__()
        self.inner, self.seconds = inner, seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            import time

            time.sleep(self.seconds)
        return self.inner(x)


def sleepy(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    return _Sleepy(small_net(input_shape, n_classes), 0.2)


class _Broken(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] > 64:
            raise RuntimeError("a bug in the user's model")
        return self.inner(x)


def broken_above_64(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    return _Broken(small_net(input_shape, n_classes))


def nan_blobs() -> tuple[np.ndarray, np.ndarray]:
    x, y = blobs()
    x[0, 0] = np.nan
    return x, y


def broken_data() -> tuple[np.ndarray, np.ndarray]:
    raise OSError("cannot open shard 3")


def _read_rows(path: str) -> list[str]:
    with open(path) as f:  # the user's own code fails here
        return f.readlines()


def raising_data(path: str = "no/such/rows.csv") -> tuple[np.ndarray, np.ndarray]:
    """A data factory whose file is missing: the error names this file's line, not autotune's."""
    rows = _read_rows(path)
    return np.zeros((len(rows), 4)), np.zeros(len(rows))


def raising_model(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    width = {"small": 16}["large"]  # a user's bug: KeyError
    return small_net(input_shape, n_classes, width)


_LEAKED: list[np.ndarray] = []  # grows on every call: what bench/memory.py must catch


def leaky_net(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """A model factory that leaks 2 MiB per trial (a module-level cache that is never cleared)."""
    _LEAKED.append(np.ones(2 ** 18, dtype=np.float64))  # ones, not zeros: the pages are touched, so resident
    return small_net(input_shape, n_classes)
