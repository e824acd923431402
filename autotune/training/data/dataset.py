"""The dataset the training loop takes (`Dataset`), and how a source's arrays become one: checked, then split.

The contract with the training loop:
- float datasets (digits, mnist1d, synthetic, npz, factory, diabetes) are float32, already standardized with
  the training split's statistics; `ds.normalize(xb)` returns them unchanged.
- image datasets (image_folder, cifar10, cifar100) are uint8 (N, C, H, W), a quarter of fp32's
  memory on the device; the loop batches them as uint8 and calls `ds.normalize(xb)` on each batch
  (on the device): `(xb.float() / 255 - mean) / std` with the training split's per-channel mean/std.
  Every model input (training, evaluation, compression, latency) goes through `normalize`.
- classification: int64 labels 0..n_classes-1. regression: float32 targets (N, T), standardized with
  the training split's mean/std (`ds.y_mean`, `ds.y_std`); `ds.n_outputs` is T (n_classes for
  classification). `tasks.py` has the loss and the metrics for each task.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from autotune.core import ConfigError
from autotune.spec import DataConfig


@dataclass(frozen=True)
class Dataset:
    """Inputs (N, C, H, W) or (N, F) and labels (or targets), split into train and val.

    x is float32 standardized, or uint8 images with `mean`/`std` to normalize each batch with
    (`normalize`). y is int64 class indices (classification) or float32 standardized targets (N, T)
    (regression: `y_mean`, `y_std` give the original units back)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    n_classes: int  # 0 for regression
    task: str = "classification"
    mean: torch.Tensor | None = None  # uint8 images: per-channel mean of x / 255 on the training split, (1, C, 1, 1)
    std: torch.Tensor | None = None  # uint8 images: per-channel std of x / 255, (1, C, 1, 1)
    y_mean: torch.Tensor | None = None  # regression: training-split mean of each target, (T,)
    y_std: torch.Tensor | None = None  # regression: training-split std of each target, (T,)
    classes: tuple[str, ...] = ()  # class names where the data has them (folder names, CIFAR's meta)
    _on_device: dict[str, tuple[torch.Tensor, ...]] = field(default_factory=dict, repr=False,
                                                                      compare=False)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def n_outputs(self) -> int:
        """The model's output width: the class count, or the number of regression targets."""
        return self.n_classes if self.task == "classification" else int(self.y_train.shape[1])

    @property
    def is_uint8(self) -> bool:
        return self.x_train.dtype == torch.uint8

    def normalize(self, xb: torch.Tensor) -> torch.Tensor:
        """A batch as the model takes it: float datasets unchanged; uint8 images as
        `(xb.float() / 255 - mean) / std` (float32, on xb's device and in its memory format).
        The statistics are moved to each device once, so a batch costs no host-device copy."""
        if xb.dtype != torch.uint8:
            return xb
        assert self.mean is not None and self.std is not None  # set for every uint8 dataset
        key = str(xb.device)
        if key not in self._on_device:  # one multiply-add per pixel: x * (1 / (255 std)) - mean / std
            self._on_device[key] = ((1.0 / (255.0 * self.std)).to(xb.device), (self.mean / self.std).to(xb.device))
        scale, shift = self._on_device[key]
        return xb.float().mul_(scale).sub_(shift)

    def on(self, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(x_train, y_train, x_val, y_val) on `dev`, copied there once per process: every trial of a study
        trains on the same data, so the host-to-device copy is not paid again by each (CPU: the tensors)."""
        if dev.type == "cpu":
            return self.x_train, self.y_train, self.x_val, self.y_val
        key = f"data:{dev}"
        if key not in self._on_device:
            self._on_device[key] = tuple(t.to(dev) for t in (self.x_train, self.y_train, self.x_val, self.y_val))
        x, y, xv, yv = self._on_device[key]
        return x, y, xv, yv

    def targets_in_units(self, y: torch.Tensor) -> torch.Tensor:
        """Regression targets (or predictions) in the data's original units."""
        assert self.y_mean is not None and self.y_std is not None
        return y * self.y_std.to(y.device) + self.y_mean.to(y.device)

@dataclass
class _Raw:
    """Arrays as a source gives them, with what to name in an error: the config key and the file."""

    x: np.ndarray
    y: np.ndarray
    key: str  # data.path, data.factory, data.name
    what: str  # the file, folder or factory the arrays came from
    classes: tuple[str, ...] = ()
    images: bool = False  # uint8 (N, C, H, W) decoded images: kept uint8, normalized per batch

# ---------------------------------------------------------------- sanity and splitting


def check_arrays(x: np.ndarray, y: np.ndarray, task: str, val_fraction: float, file: str, key: str,
                 what: str) -> None:
    """Data the trainer cannot use honestly is one ConfigError naming `what` (the file) and the problem:
    not numbers, mismatched lengths or shapes, non-finite values, labels that are not class indices,
    fewer than two classes, a class or a split too small, constant regression targets."""
    check_task = _regression_problem if task == "regression" else _label_problem
    problem = _shape_problem(x, y, task) or _non_finite(x, "x") or _non_finite(y, "y") or check_task(y, val_fraction)
    if problem is not None:
        raise ConfigError(file, key, f"{what}: {problem}")


def _shape_problem(x: np.ndarray, y: np.ndarray, task: str) -> str | None:
    """Numbers, of the shapes the models take, as many labels as samples."""
    if x.dtype.kind not in "biuf":
        return f"x must hold numbers; got dtype {x.dtype}"
    if y.dtype.kind not in "biuf":
        sample = y.flat[0].item() if y.size else None
        rule = "labels y must be class indices (integers >= 0)" if task == "classification" else \
            "targets y must be numbers"
        return f"{rule}; got dtype {y.dtype} (e.g. {sample!r})"
    if x.ndim not in (2, 3, 4) or (y.ndim != 1 if task == "classification" else y.ndim not in (1, 2)):
        want = "y of shape (N,)" if task == "classification" else "y of shape (N,) or (N, T)"
        return f"need x of shape (N, F), (N, H, W) or (N, C, H, W) and {want}; got x {x.shape}, y {y.shape}"
    if len(x) != len(y):
        return f"x has {len(x)} samples but y has {len(y)}"
    return None


def _non_finite(a: np.ndarray, name: str) -> str | None:
    """NaN or inf in a float array: how many samples, and the first."""
    if a.dtype.kind != "f":
        return None
    bad = ~np.isfinite(a.reshape(len(a), -1)).all(axis=1)
    if not bad.any():
        return None
    return f"{name} has non-finite values (NaN or inf) in {int(bad.sum())} samples, the first is sample " \
           f"{int(np.argmax(bad))}"


def _regression_problem(y: np.ndarray, val_fraction: float) -> str | None:
    """Both splits big enough for a mean and a spread; no constant target."""
    n_val = int(np.ceil(val_fraction * len(y)))
    if min(n_val, len(y) - n_val) < 2:
        return f"{len(y)} samples leave fewer than 2 for training or validation at val_fraction {val_fraction:g}"
    flat = y.reshape(len(y), -1)
    const = np.flatnonzero(flat.std(axis=0) == 0)
    if len(const):
        return f"target {int(const[0])} is constant ({flat[0, const[0]].item()!r}): nothing to learn"
    return None


def _label_problem(y: np.ndarray, val_fraction: float) -> str | None:
    """Class indices, at least two classes, each in both splits of the stratified split."""
    n_val = int(np.ceil(val_fraction * len(y)))
    if y.dtype.kind == "f":
        frac = np.flatnonzero(y != np.round(y))
        if len(frac):
            return f"labels y must be class indices (integers >= 0); sample {int(frac[0])} is " \
                   f"{y[frac[0]].item()!r} (real-valued targets: set task: regression)"
    neg = np.flatnonzero(y < 0)
    if len(neg):
        return f"labels y must be class indices (integers >= 0); sample {int(neg[0])} is {y[neg[0]].item()!r}"
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2:
        return f"labels y hold {'no class' if not len(classes) else f'one class ({classes[0].item()!r})'}; " \
               "need at least two"
    small = int(np.argmin(counts))
    if counts[small] < 2:
        return f"class {classes[small].item()!r} has {counts[small]} sample; the stratified split needs at least " \
               "2 per class (one for training, one for validation)"
    if n_val < len(classes) or len(y) - n_val < len(classes):
        return f"{len(y)} samples at val_fraction {val_fraction:g} leave {n_val} for validation and " \
               f"{len(y) - n_val} for training: each split needs one sample of each of the {len(classes)} classes"
    return None


def _split_targets(y: np.ndarray, task: str) -> tuple[np.ndarray, int, np.ndarray | None]:
    """(y as the trainer stores it, n_classes, what to stratify on)."""
    if task == "regression":
        return y.astype(np.float32).reshape(len(y), -1), 0, None
    classes, inv = np.unique(y, return_inverse=True)  # labels become 0..K-1 in sorted order
    return inv.astype(np.int64), int(len(classes)), inv


def _split(raw: _Raw, cfg: DataConfig, task: str) -> Dataset:
    """Float inputs, standardized with training statistics only (per channel for images)."""
    from sklearn.model_selection import train_test_split

    x = raw.x[:, None] if raw.x.ndim == 3 else raw.x  # (N, H, W) images: one channel
    y, n_classes, strat = _split_targets(raw.y, task)
    xtr, xva, ytr, yva = train_test_split(
        x.astype(np.float32), y, test_size=cfg.val_fraction, random_state=cfg.split_seed, stratify=strat,
    )
    axes = (0, 2, 3) if xtr.ndim == 4 else (0,)
    mean = xtr.mean(axis=axes, keepdims=True)
    std = xtr.std(axis=axes, keepdims=True) + 1e-6
    t = torch.from_numpy
    ds = Dataset(t((xtr - mean) / std), t(ytr), t((xva - mean) / std), t(yva), n_classes, task,
                 classes=_class_names(raw, n_classes))
    return _standardize_targets(ds) if task == "regression" else ds


def _split_images(raw: _Raw, cfg: DataConfig, task: str) -> Dataset:
    """uint8 images stay uint8; per-channel mean/std of x / 255 on the training split, for `normalize`."""
    from sklearn.model_selection import train_test_split

    y, n_classes, strat = _split_targets(raw.y, task)
    itr, iva = train_test_split(np.arange(len(y)), test_size=cfg.val_fraction, random_state=cfg.split_seed,
                                stratify=strat)
    xtr, xva = torch.from_numpy(raw.x[itr]), torch.from_numpy(raw.x[iva])
    total = torch.zeros(xtr.shape[1], dtype=torch.float64)
    sq = torch.zeros_like(total)
    for i in range(0, len(xtr), 4096):  # in chunks: a float copy of 50,000 images would be 600 MB
        chunk = xtr[i: i + 4096].to(torch.float64) / 255.0
        total += chunk.sum(dim=(0, 2, 3))
        sq += (chunk * chunk).sum(dim=(0, 2, 3))
    n = len(xtr) * xtr.shape[2] * xtr.shape[3]
    mean = total / n
    std = (sq / n - mean * mean).clamp_min(0).sqrt() + 1e-6
    ds = Dataset(xtr, torch.from_numpy(y[itr]), xva, torch.from_numpy(y[iva]), n_classes, task,
                 mean=mean.float().view(1, -1, 1, 1), std=std.float().view(1, -1, 1, 1),
                 classes=_class_names(raw, n_classes))
    return _standardize_targets(ds) if task == "regression" else ds


def _class_names(raw: _Raw, n_classes: int) -> tuple[str, ...]:
    return raw.classes if len(raw.classes) == n_classes else ()


def _standardize_targets(ds: Dataset) -> Dataset:
    """Regression targets scaled by the training split's mean and std: one loss scale for every dataset."""
    y_mean, y_std = ds.y_train.mean(0), ds.y_train.std(0, correction=0)
    y_std = torch.where(y_std > 0, y_std, torch.ones_like(y_std))  # constant on the training split only
    return Dataset(ds.x_train, (ds.y_train - y_mean) / y_std, ds.x_val, (ds.y_val - y_mean) / y_std, 0,
                   "regression", ds.mean, ds.std, y_mean, y_std)
