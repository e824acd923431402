"""Datasets (bundled digits, synthetic, `.npz`, a user factory) and the two ways to batch them.

Small datasets live on the device as tensors and are batched by a permutation index
(no DataLoader, no per-step host work); a tuned `DataLoader` is the other option,
for data that does not fit or to measure what the loader costs.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from .config import DataConfig, load_factory, resolve_path
from .errors import ConfigError


@dataclass(frozen=True)
class Dataset:
    """Standardized float32 inputs (N, C, H, W) or (N, F), int64 labels, split into train and val."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    n_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def load(cfg: DataConfig, source: str = "<config>") -> Dataset:
    """Build (and cache: trials of one study share it) the dataset a config names."""
    return _load_cached(json.dumps(cfg.model_dump(mode="json"), sort_keys=True), source)


@functools.lru_cache(maxsize=4)
def _load_cached(key: str, source: str) -> Dataset:
    cfg = DataConfig.model_validate(json.loads(key))
    file = source.rsplit("/", 1)[-1]
    x, y = _arrays(cfg, source, file)
    return _split(x, y, cfg, file)


def _arrays(cfg: DataConfig, source: str, file: str) -> tuple[np.ndarray, np.ndarray]:
    if cfg.factory is not None:
        fn = load_factory(cfg.factory, file, "data.factory")
        kwargs = {k: v for k, v in cfg.kwargs.items()}
        out = fn(**kwargs)
        if isinstance(out, dict):
            out = (out.get("x"), out.get("y"))
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ConfigError(file, "data.factory", "must return (x, y) arrays or a dict with keys x and y")
        return np.asarray(out[0]), np.asarray(out[1])
    return _BUILTIN[str(cfg.name)](cfg, source, file)


def _digits(cfg: DataConfig, source: str, file: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits  # ships with scikit-learn: no download

    d = load_digits()
    return d.images.astype(np.float32)[:, None, :, :], d.target.astype(np.int64)


def _synthetic(cfg: DataConfig, source: str, file: str) -> tuple[np.ndarray, np.ndarray]:
    """Class prototypes plus Gaussian noise; `label_noise` flips that share of labels at random."""
    rng = np.random.default_rng(cfg.split_seed + 12345)
    protos = rng.normal(0.0, 1.0, size=(cfg.n_classes, *cfg.shape)).astype(np.float32)
    y = rng.integers(0, cfg.n_classes, size=cfg.n_samples)
    x = 0.35 * protos[y] + rng.normal(0.0, 1.0, size=(cfg.n_samples, *cfg.shape)).astype(np.float32)
    flip = rng.random(cfg.n_samples) < cfg.label_noise
    y[flip] = rng.integers(0, cfg.n_classes, size=int(flip.sum()))
    return x.astype(np.float32), y.astype(np.int64)


def _npz(cfg: DataConfig, source: str, file: str) -> tuple[np.ndarray, np.ndarray]:
    path = resolve_path(str(cfg.path), source)
    try:
        arrays = np.load(path)
    except Exception as e:
        raise ConfigError(file, "data.path", f"cannot read {cfg.path} as .npz: {e}") from None
    missing = [k for k in ("x", "y") if k not in arrays]
    if missing:
        raise ConfigError(file, "data.path", f"{cfg.path} needs arrays x and y; missing {', '.join(missing)}; "
                                             f"has {', '.join(arrays.files) or 'none'}")
    return arrays["x"], arrays["y"]


_BUILTIN = {"digits": _digits, "synthetic": _synthetic, "npz": _npz}


def _split(x: np.ndarray, y: np.ndarray, cfg: DataConfig, file: str) -> Dataset:
    from sklearn.model_selection import train_test_split

    if x.ndim == 3:  # (N, H, W) images: one channel
        x = x[:, None]
    if x.ndim not in (2, 4) or len(x) != len(y) or y.ndim != 1:
        raise ConfigError(file, "data", f"need x of shape (N, F), (N, H, W) or (N, C, H, W) and y of shape (N,); "
                                        f"got x {x.shape}, y {y.shape}")
    classes, y = np.unique(y, return_inverse=True)
    if len(classes) < 2:
        raise ConfigError(file, "data", "labels must contain at least two classes")
    counts = np.bincount(y)
    strat = y if counts.min() >= 2 else None
    xtr, xva, ytr, yva = train_test_split(
        x.astype(np.float32), y.astype(np.int64), test_size=cfg.val_fraction, random_state=cfg.split_seed,
        stratify=strat,
    )
    # Standardize with training statistics only (per channel for images).
    axes = (0, 2, 3) if xtr.ndim == 4 else (0,)
    mean = xtr.mean(axis=axes, keepdims=True)
    std = xtr.std(axis=axes, keepdims=True) + 1e-6
    t = torch.from_numpy
    return Dataset(t((xtr - mean) / std), t(ytr), t((xva - mean) / std), t(yva), int(len(classes)))


def subset(x: torch.Tensor, y: torch.Tensor, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A stratified share of the training split: the same classes, fewer samples (cheap trials)."""
    if fraction >= 1.0:
        return x, y
    g = torch.Generator().manual_seed(seed)
    keep = []
    for c in torch.unique(y):
        idx = torch.nonzero(y == c).flatten()
        n = max(1, int(round(len(idx) * fraction)))
        keep.append(idx[torch.randperm(len(idx), generator=g)[:n]])
    sel = torch.cat(keep).sort().values
    return x[sel], y[sel]


class DeviceBatches:
    """The whole training split on the device, batched by a fresh permutation each epoch."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, device: torch.device,
                 channels_last: bool, seed: int) -> None:
        self.x = x.to(device)
        if channels_last and self.x.ndim == 4:
            self.x = self.x.contiguous(memory_format=torch.channels_last)
        self.y = y.to(device)
        self.batch_size = batch_size
        self.gen = torch.Generator(device=device).manual_seed(seed)

    def __len__(self) -> int:
        return -(-len(self.y) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        perm = torch.randperm(len(self.y), device=self.x.device, generator=self.gen)
        for i in range(0, len(perm), self.batch_size):
            idx = perm[i: i + self.batch_size]
            yield self.x[idx], self.y[idx]


class LoaderBatches:
    """A `DataLoader` over host tensors; batches are copied to the device without blocking."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, device: torch.device,
                 channels_last: bool, seed: int, num_workers: int, pin_memory: bool, prefetch_factor: int,
                 persistent_workers: bool) -> None:
        kwargs: dict[str, Any] = {}
        if num_workers > 0:  # DataLoader rejects these two without workers
            kwargs = {"prefetch_factor": prefetch_factor, "persistent_workers": persistent_workers}
        self.loader = DataLoader(
            TensorDataset(x, y), batch_size=batch_size, shuffle=True, num_workers=num_workers,
            pin_memory=pin_memory and device.type == "cuda", generator=torch.Generator().manual_seed(seed),
            **kwargs,
        )
        self.device = device
        self.channels_last = channels_last and x.ndim == 4

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for xb, yb in self.loader:
            xb = xb.to(self.device, non_blocking=True)
            if self.channels_last:
                xb = xb.contiguous(memory_format=torch.channels_last)
            yield xb, yb.to(self.device, non_blocking=True)


def factory_kwargs(fn: Any, offered: dict[str, Any]) -> dict[str, Any]:
    """The subset of `offered` that a user's factory accepts (all of it if it takes **kwargs)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return offered
    return {k: v for k, v in offered.items() if k in params}
