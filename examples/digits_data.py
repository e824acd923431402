"""scikit-learn's bundled 8x8 digits (no download) as tensors, shared by the examples written like public programs."""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=1)
def digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train images, train labels, test images, test labels): 1x8x8 images scaled to [0, 1], 80/20 split."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    cut = int(len(y) * 0.8)
    return x[perm[:cut]], y[perm[:cut]], x[perm[cut:]], y[perm[cut:]]
