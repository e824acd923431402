"""What differs between classification and regression: the loss, the validation metrics, a guess's loss.

The training loop asks this module, never `if task == ...` itself:
- `loss_fn(ds, label_smoothing)`: cross-entropy on logits, or mean squared error on standardized targets.
- `evaluate(model, ds, x, y, ...)`: the validation metrics, summed on the device and read once.
- `chance_loss(ds)`: the loss of a model that knows nothing (the divergence rule's ceiling).
Regression metrics: `val_loss` is the MSE on standardized targets (the training loss's scale);
`val_mse` and `val_mae` are in the targets' original units (averaged over targets when there are
several); `val_r2` is the coefficient of determination (1 is perfect, 0 is predicting the mean).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from autotune.training import accel
from autotune.training.data.registry import Dataset


def loss_fn(ds: Dataset, label_smoothing: float = 0.0) -> nn.Module:
    """The training loss for the dataset's task (`label_smoothing` is for classification only)."""
    if ds.task == "regression":
        return nn.MSELoss()
    return nn.CrossEntropyLoss(label_smoothing=label_smoothing)


def chance_loss(ds: Dataset) -> float:
    """Loss of a guess: ln(classes) for a uniform one; 1.0 (the variance of standardized targets) for
    predicting the training mean."""
    return 1.0 if ds.task == "regression" else math.log(ds.n_classes)


def evaluate(model: nn.Module, ds: Dataset, x: torch.Tensor, y: torch.Tensor, batch_size: int, dev: torch.device,
             precision: str = "fp32", channels_last: bool = False) -> dict[str, float]:
    """Validation metrics of `model` on (x, y), both already on `dev` (x as stored: uint8 images are
    normalized per batch here). Classification: val_loss (mean cross-entropy), val_accuracy.
    Regression: val_loss (MSE, standardized), val_mse, val_mae (original units), val_r2."""
    model.eval()
    regression = ds.task == "regression"
    loss_sum = torch.zeros((), device=dev)
    hits = torch.zeros((), device=dev)  # correct predictions; regression: absolute errors, per target
    sq = torch.zeros(ds.n_outputs if regression else 1, device=dev)  # regression: squared errors per target
    with torch.inference_mode(), accel.autocast(dev, precision):
        for i in range(0, len(y), batch_size):
            xb, yb = ds.normalize(x[i: i + batch_size]), y[i: i + batch_size]
            if channels_last and xb.ndim == 4:
                xb = xb.contiguous(memory_format=torch.channels_last)
            out = model(xb).float()
            if regression:
                err = out.reshape(yb.shape) - yb
                sq += (err * err).sum(0)
                hits = hits + err.abs().sum(0)
            else:
                loss_sum += nn.functional.cross_entropy(out, yb, reduction="sum")
                hits += (out.argmax(1) == yb).sum()
    n = max(1, len(y))
    if not regression:
        return {"val_loss": float(loss_sum) / n, "val_accuracy": float(hits) / n}
    assert ds.y_std is not None
    y_std = ds.y_std.to(dev)
    ss_tot = ((y - y.mean(0)) ** 2).sum(0).clamp_min(1e-12)
    r2 = 1.0 - sq / ss_tot  # scale-free: the same in standardized and original units
    mse, mae, val_loss, r2_mean = torch.stack([
        (sq * y_std ** 2).mean() / n, (hits * y_std).mean() / n, sq.mean() / n, r2.mean()]).tolist()
    return {"val_loss": val_loss, "val_mse": mse, "val_mae": mae, "val_r2": r2_mean}
