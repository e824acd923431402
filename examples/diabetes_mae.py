"""Your own regression model and metric: an MLP on scikit-learn's bundled diabetes data (no download),
tuned for validation mean absolute error (in the target's units) against training time
(`examples/diabetes_mae.yaml`).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

import autotune


@functools.lru_cache(maxsize=1)
def diabetes() -> tuple[torch.Tensor, ...]:
    """Standardized features and targets (training statistics), split 80/20 with a fixed seed."""
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    x = torch.tensor(d.data, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.float32)[:, None]
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    cut = int(len(y) * 0.8)
    tr, va = perm[:cut], perm[cut:]
    x_mean, x_std = x[tr].mean(0), x[tr].std(0)
    y_mean, y_std = y[tr].mean(), y[tr].std()
    return ((x[tr] - x_mean) / x_std, (y[tr] - y_mean) / y_std, (x[va] - x_mean) / x_std, y[va], y_mean, y_std)


def mlp(n_in: int, width: int, depth: int, dropout: float) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(n_in, width), nn.ReLU(), nn.Dropout(dropout)]
        n_in = width
    return nn.Sequential(*layers, nn.Linear(n_in, 1))


def fit(ctx: autotune.TrialContext) -> None:
    x, y, x_val, y_val, y_mean, y_std = diabetes()
    model, _ = ctx.prepare(mlp(x.shape[1], ctx.params["width"], ctx.params["depth"], ctx.params["dropout"]))
    train = ctx.loader((x, y))
    x_val, y_val = x_val.to(ctx.device), y_val.to(ctx.device)
    for _ in ctx.epochs():
        model.train()
        for xb, yb in train:
            with ctx.autocast():
                loss = F.mse_loss(model(xb).float(), yb)
            ctx.backward(loss)
        ctx.model.eval()
        with torch.inference_mode():
            pred = ctx.model(x_val).float() * y_std.to(ctx.device) + y_mean.to(ctx.device)  # back to target units
        mse_standardized = float(F.mse_loss(pred, y_val)) / float(y_std) ** 2  # the training loss's scale
        ctx.report(val_mae=float((pred - y_val).abs().mean()), val_loss=mse_standardized)
