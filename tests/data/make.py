"""Writes the small bad-data files under tests/data/ that tests/configs/*.yaml point at.

    python tests/data/make.py      # from the repository root; the files are committed
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def blobs(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = np.arange(n) % 2
    return rng.normal(size=(n, 4)).astype(np.float32) + y[:, None], y.astype(np.int64)


def png(path: Path, pixels: np.ndarray) -> None:
    """A grayscale 8-bit PNG written by hand (no Pillow needed to make the fixtures)."""
    h, w = pixels.shape
    raw = b"".join(b"\x00" + pixels[r].astype(np.uint8).tobytes() for r in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    ihdr = w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, 0, 0, 0, 0])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) +
                     chunk(b"IEND", b""))


def main() -> None:
    x, y = blobs()
    bad_x = x.copy()
    bad_x[7, 2] = np.nan
    np.savez(HERE / "nan_x.npz", x=bad_x, y=y)
    np.savez(HERE / "float_labels.npz", x=x, y=np.where(y == 1, 0.5, 0.0))
    np.savez(HERE / "string_labels.npz", x=x, y=np.array(["cat", "dog"] * 20))
    np.savez(HERE / "object_labels.npz", x=x, y=np.array([{"label": int(v)} for v in y], dtype=object))
    np.savez(HERE / "negative_labels.npz", x=x, y=np.where(y == 1, 1, -1))
    np.savez(HERE / "one_class.npz", x=x, y=np.zeros_like(y))
    lonely = y.copy()
    lonely[5] = 2
    np.savez(HERE / "class_too_small.npz", x=x, y=lonely)
    np.savez(HERE / "mismatched.npz", x=x, y=y[:-1])
    targets = x.sum(1)
    targets[3] = np.inf
    np.savez(HERE / "inf_targets.npz", x=x, y=targets)
    np.savez(HERE / "constant_targets.npz", x=x, y=np.full(len(x), 2.5, dtype=np.float32))
    # An image folder with one file that is not an image.
    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        for i in range(3):
            png(HERE / "images_broken" / cls / f"{i}.png", rng.integers(0, 256, (8, 8)))
    (HERE / "images_broken" / "b" / "3.png").write_bytes(b"not a png, a text file with the wrong name\n")
    # An image folder whose images differ in size (no data.image_size).
    for cls in ("a", "b"):
        for i in range(2):
            png(HERE / "images_sizes" / cls / f"{i}.png", rng.integers(0, 256, (8, 8)))
    png(HERE / "images_sizes" / "b" / "2.png", rng.integers(0, 256, (10, 12)))


if __name__ == "__main__":
    main()
