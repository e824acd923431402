"""Datasets: loading, checking and splitting them (batching is the trial context's: context.loader).

Datasets: bundled digits and diabetes (scikit-learn, no download), synthetic, `.npz` files, an image
folder (one sub-folder per class), CIFAR-10/100 python batches from a local folder, a user factory.
Nothing is ever downloaded. Every dataset is checked before the first trial (`check_arrays`): a
problem is one ConfigError naming the file and what is wrong.

The contract with the training loop (`Dataset`):
- float datasets (digits, synthetic, npz, factory, diabetes) are float32, already standardized with
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

import concurrent.futures
import functools
import hashlib
import inspect
import json
import os
import pickle
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import DataConfig, load_factory, resolve_path
from .errors import ConfigError, describe_exception, lookup

DEFAULT_CACHE_DIR = "studies/.cache"  # next to the default study storage (sqlite:///studies/NAME.db)
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"


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


def load(cfg: DataConfig, source: str = "<config>", task: str = "classification") -> Dataset:
    """Build (and cache: trials of one study share it) the dataset a config names, checked for the task."""
    return _load_cached(json.dumps(cfg.model_dump(mode="json"), sort_keys=True), source, task)


@functools.lru_cache(maxsize=4)
def _load_cached(key: str, source: str, task: str) -> Dataset:
    cfg = DataConfig.model_validate(json.loads(key))
    file = source.rsplit("/", 1)[-1]
    raw = _arrays(cfg, source, file)
    check_arrays(raw.x, raw.y, task, cfg.val_fraction, file, raw.key, raw.what)
    if raw.images:
        return _split_images(raw, cfg, task)
    return _split(raw, cfg, task)


@dataclass
class _Raw:
    """Arrays as a source gives them, with what to name in an error: the config key and the file."""

    x: np.ndarray
    y: np.ndarray
    key: str  # data.path, data.factory, data.name
    what: str  # the file, folder or factory the arrays came from
    classes: tuple[str, ...] = ()
    images: bool = False  # uint8 (N, C, H, W) decoded images: kept uint8, normalized per batch


def _arrays(cfg: DataConfig, source: str, file: str) -> _Raw:
    if cfg.factory is not None:
        fn = load_factory(cfg.factory, file, "data.factory")
        kwargs = {k: v for k, v in cfg.kwargs.items()}
        try:
            out = fn(**kwargs)
        except Exception as e:  # the user's code: one line naming it and where it raised
            raise ConfigError(file, "data.factory", f"{cfg.factory} raised {describe_exception(e)}") from None
        if isinstance(out, dict):
            out = (out.get("x"), out.get("y"))
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ConfigError(file, "data.factory", "must return (x, y) arrays or a dict with keys x and y")
        x, y = (_as_array(a, file, "data.factory", f"{cfg.factory}: {n}") for a, n in zip(out, "xy"))
        return _Raw(x, y, "data.factory", str(cfg.factory))
    return lookup(DATASETS, str(cfg.name), file, "data.name", "dataset", " (or data.factory)").load(cfg, source, file)


def _as_array(a: Any, file: str, key: str, what: str) -> np.ndarray:
    try:
        return np.asarray(a.detach().cpu() if isinstance(a, torch.Tensor) else a)
    except Exception as e:  # ragged lists and the like
        raise ConfigError(file, key, f"{what} is not an array: {type(e).__name__}: {e}") from None


def _digits(cfg: DataConfig, source: str, file: str) -> _Raw:
    from sklearn.datasets import load_digits  # ships with scikit-learn: no download

    d = load_digits()
    return _Raw(d.images.astype(np.float32)[:, None, :, :], d.target.astype(np.int64), "data.name", "digits")


def _diabetes(cfg: DataConfig, source: str, file: str) -> _Raw:
    """scikit-learn's bundled diabetes data: 442 patients, 10 features, disease progression after a year."""
    from sklearn.datasets import load_diabetes  # ships with scikit-learn: no download

    d = load_diabetes()
    return _Raw(d.data.astype(np.float32), d.target.astype(np.float32), "data.name", "diabetes")


def _synthetic(cfg: DataConfig, source: str, file: str) -> _Raw:
    """Class prototypes plus Gaussian noise; `label_noise` flips that share of labels at random."""
    rng = np.random.default_rng(cfg.split_seed + 12345)
    protos = rng.normal(0.0, 1.0, size=(cfg.n_classes, *cfg.shape)).astype(np.float32)
    y = rng.integers(0, cfg.n_classes, size=cfg.n_samples)
    x = 0.35 * protos[y] + rng.normal(0.0, 1.0, size=(cfg.n_samples, *cfg.shape)).astype(np.float32)
    flip = rng.random(cfg.n_samples) < cfg.label_noise
    y[flip] = rng.integers(0, cfg.n_classes, size=int(flip.sum()))
    return _Raw(x.astype(np.float32), y.astype(np.int64), "data.name", "synthetic")


def _npz(cfg: DataConfig, source: str, file: str) -> _Raw:
    path = resolve_path(str(cfg.path), source)
    try:
        arrays = np.load(path)  # allow_pickle stays off: a data file never runs code
    except Exception as e:
        why = "not a NumPy file (np.savez writes one)" if "pickle" in str(e) else f"{type(e).__name__}: {e}"
        raise ConfigError(file, "data.path", f"cannot read {cfg.path} as .npz: {why}") from None
    if not isinstance(arrays, np.lib.npyio.NpzFile):  # np.save's .npy under an .npz name: one array, no x and y
        raise ConfigError(file, "data.path", f"{cfg.path} holds one array (np.save); save x and y with "
                                             "np.savez(path, x=..., y=...)")
    missing = [k for k in ("x", "y") if k not in arrays]
    if missing:
        raise ConfigError(file, "data.path", f"{cfg.path} needs arrays x and y; missing {', '.join(missing)}; "
                                             f"has {', '.join(arrays.files) or 'none'}")
    out = []
    for k in ("x", "y"):
        try:
            out.append(arrays[k])
        except ValueError as e:  # object arrays: np.load refuses pickles
            if "allow_pickle" in str(e):
                raise ConfigError(file, "data.path", f"{cfg.path}: {k} holds Python objects, not numbers "
                                                     "(an object array); save numeric arrays") from None
            raise ConfigError(file, "data.path", f"cannot read {k} from {cfg.path}: {e}") from None
        except Exception as e:  # a damaged member
            raise ConfigError(file, "data.path", f"cannot read {k} from {cfg.path}: {type(e).__name__}: {e}") \
                from None
    return _Raw(out[0], out[1], "data.path", str(cfg.path))


# ---------------------------------------------------------------- image folders


def _folder(cfg: DataConfig, source: str, file: str, hint: str = "") -> Path:
    if not cfg.path:
        raise ConfigError(file, "data.path", f"the {cfg.name} dataset needs a path to a folder{hint}")
    root = resolve_path(cfg.path, source)
    if not root.is_dir():
        raise ConfigError(file, "data.path", f"no such folder: {cfg.path}{hint}")
    return root


def _image_folder(cfg: DataConfig, source: str, file: str) -> _Raw:
    """One sub-folder per class (torchvision's ImageFolder layout), decoded once into a uint8 cache."""
    root = _folder(cfg, source, file, " with one sub-folder of images per class")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if len(classes) < 2:
        raise ConfigError(file, "data.path", f"{cfg.path} needs one sub-folder of images per class, at least two "
                                             f"(torchvision's ImageFolder layout); found {len(classes)}"
                                             + (f": {classes[0]}" if classes else ""))
    files: list[Path] = []
    labels: list[int] = []
    for i, c in enumerate(classes):
        found = sorted(p for p in (root / c).rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())
        if not found:
            raise ConfigError(file, "data.path", f"{cfg.path}/{c}: no image files ({', '.join(IMAGE_EXTENSIONS)})")
        files += found
        labels += [i] * len(found)
    rel = [p.relative_to(root).as_posix() for p in files]
    stats = [(r, st.st_size, st.st_mtime_ns) for r, st in zip(rel, (p.stat() for p in files))]
    digest = hashlib.sha256(json.dumps({"format": 1, "root": str(root.resolve()), "image_size": cfg.image_size,
                                        "files": stats}).encode()).hexdigest()[:32]
    cache = Path(cfg.cache_dir or DEFAULT_CACHE_DIR) / f"image_folder-{digest}.pt"
    where = f"{cfg.path}/"
    y = np.asarray(labels, dtype=np.int64)
    x = _read_cache(cache)
    if x is None or len(x) != len(y):
        x = _decode_images(files, rel, cfg.image_size, file, where)
        _write_cache(cache, x)
    return _Raw(x, y, "data.path", str(cfg.path), tuple(classes), images=True)


def _decode_images(files: list[Path], rel: list[str], size: int | None, file: str, where: str) -> np.ndarray:
    """Every image as uint8 (C, H, W): RGB, or one channel when all of them are grayscale; resized to
    size x size when `size` is set, else all must share one size. Decoded on threads (Pillow releases
    the GIL); an unreadable file or a size that differs is an error naming the file."""
    from PIL import Image

    def decode(i: int) -> np.ndarray:
        try:
            with Image.open(files[i]) as img:
                gray = img.mode in ("1", "L", "LA", "I", "I;16", "F")
                img = img.convert("L" if gray else "RGB")
                if size is not None and img.size != (size, size):
                    img = img.resize((size, size), Image.Resampling.BILINEAR)
                a = np.asarray(img, dtype=np.uint8)
        except Exception as e:  # truncated, not an image, no permission...
            raise ConfigError(file, "data.path", f"{where}{rel[i]}: cannot read as an image: "
                                                 f"{type(e).__name__}: {e}") from None
        return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)

    workers = min(8, os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        images = list(pool.map(decode, range(len(files))))  # in order: the first bad file is the one named
    first = images[0].shape[1:]
    for r, a in zip(rel, images):
        if a.shape[1:] != first:
            raise ConfigError(file, "data.path", f"{where}{r}: {a.shape[2]}x{a.shape[1]} pixels, but {where}{rel[0]} "
                                                 f"is {first[1]}x{first[0]}; set data.image_size to resize every "
                                                 "image to one size")
    channels = max(a.shape[0] for a in images)
    return np.stack([np.repeat(a, channels, 0) if a.shape[0] != channels else a for a in images])


def _read_cache(path: Path) -> np.ndarray | None:
    if not path.is_file():
        return None
    try:
        return torch.load(path, weights_only=True).numpy()
    except Exception:  # damaged (e.g. a full disk mid-write): decode again
        return None


def _write_cache(path: Path, x: np.ndarray) -> None:
    """Atomically (write, then rename): workers decoding the same folder at once never see half a file."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(torch.from_numpy(x), tmp)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        warnings.warn(f"cannot keep decoded images in {path.parent}: {e}; they will be decoded again next run",
                      stacklevel=2)


# ---------------------------------------------------------------- CIFAR python batches


@dataclass(frozen=True)
class _CifarFormat:
    label: str  # for messages
    folder: str  # the folder the archive extracts to
    archive: str
    train: tuple[str, ...]  # the batch files read (the test batch is not: val comes from the training split)
    labels_key: bytes
    meta: str
    names_key: bytes


CIFAR: dict[str, _CifarFormat] = {
    "cifar10": _CifarFormat("CIFAR-10", "cifar-10-batches-py", "cifar-10-python.tar.gz",
                            tuple(f"data_batch_{i}" for i in range(1, 6)), b"labels", "batches.meta", b"label_names"),
    "cifar100": _CifarFormat("CIFAR-100", "cifar-100-python", "cifar-100-python.tar.gz", ("train",),
                             b"fine_labels", "meta", b"fine_label_names"),
}


class _ArraysOnly(pickle.Unpickler):
    """CIFAR's batches are pickles; this unpickler builds dicts, lists and numpy arrays and nothing else,
    so a file in a data folder cannot run code."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing {module}.{name}: a CIFAR batch holds only arrays and lists")
        return super().find_class(module, name)


def _cifar(cfg: DataConfig, source: str, file: str) -> _Raw:
    fmt = CIFAR[str(cfg.name)]
    hint = (f"; {cfg.name} reads {', '.join(fmt.train)} from the {fmt.folder} folder that {fmt.archive} "
            f"extracts to (from {CIFAR_URL}); autotune never downloads data")
    if not cfg.path:
        raise ConfigError(file, "data.path", f"the {cfg.name} dataset needs a path{hint}")
    root = resolve_path(cfg.path, source)
    if (root / fmt.folder).is_dir():  # the folder the archive was extracted into is fine too
        root = root / fmt.folder
    if not root.is_dir():
        raise ConfigError(file, "data.path", f"no such folder: {cfg.path}{hint}")
    missing = [f for f in fmt.train if not (root / f).is_file()]
    if missing:
        raise ConfigError(file, "data.path", f"{cfg.path} is not a complete {fmt.label} python folder: missing "
                                             f"{', '.join(missing)}{hint}")
    xs, ys = [], []
    for name in fmt.train:
        batch = _unpickle(root / name, file, f"{cfg.path}/{name}")
        data, labels = batch.get(b"data"), batch.get(fmt.labels_key)
        if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[1] != 3072 or labels is None \
                or len(labels) != len(data):
            raise ConfigError(file, "data.path", f"{cfg.path}/{name}: not a {fmt.label} batch (needs 'data' of "
                                                 f"shape (N, 3072) and '{fmt.labels_key.decode()}' with N labels)")
        xs.append(data.astype(np.uint8, copy=False).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(labels))
    classes: tuple[str, ...] = ()
    if (root / fmt.meta).is_file():
        names = _unpickle(root / fmt.meta, file, f"{cfg.path}/{fmt.meta}").get(fmt.names_key, [])
        classes = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)
    return _Raw(np.concatenate(xs), np.concatenate(ys), "data.path", str(cfg.path), classes, images=True)


def _unpickle(path: Path, file: str, what: str) -> dict[bytes, Any]:
    try:
        with open(path, "rb") as f:
            out = _ArraysOnly(f, encoding="bytes").load()
    except Exception as e:
        raise ConfigError(file, "data.path", f"{what}: cannot read as a CIFAR python batch: "
                                             f"{type(e).__name__}: {e}") from None
    if not isinstance(out, dict):
        raise ConfigError(file, "data.path", f"{what}: not a CIFAR python batch (a {type(out).__name__}, "
                                             "not a dict)")
    return out


@dataclass(frozen=True)
class Builtin:
    """A built-in dataset: its loader `(cfg, source, file) -> arrays` and the task its labels are for."""

    load: Callable[[DataConfig, str, str], _Raw]
    task: str | None  # None: either task (the file's own labels decide)


# The dataset registry: `data.name` -> loader; the config's allowed names and each one's task come from here.
DATASETS: dict[str, Builtin] = {
    "digits": Builtin(_digits, "classification"), "synthetic": Builtin(_synthetic, "classification"),
    "npz": Builtin(_npz, None), "image_folder": Builtin(_image_folder, "classification"),
    "cifar10": Builtin(_cifar, "classification"), "cifar100": Builtin(_cifar, "classification"),
    "diabetes": Builtin(_diabetes, "regression"),
}


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


def factory_kwargs(fn: Any, offered: dict[str, Any]) -> dict[str, Any]:
    """The subset of `offered` that a user's factory accepts (all of it if it takes **kwargs)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return offered
    return {k: v for k, v in offered.items() if k in params}
