"""The image datasets, kept uint8 (N, C, H, W): an image folder (one sub-folder per class, decoded once into a
cache) and CIFAR-10/100 python batches from a local folder (read by an unpickler that builds arrays only)."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from autotune.core import ConfigError, resolve_path
from autotune.spec import DataConfig
from autotune.training.data.dataset import _Raw
from autotune.training.data.sources import DEFAULT_CACHE_DIR

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"


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
