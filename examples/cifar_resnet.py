"""Your own ResNet, data loading and loop on CIFAR-10, tuned by autotune (`examples/cifar_resnet.yaml`).

Reads the standard python-format batches (`cifar-10-batches-py`: data_batch_1..5 and test_batch, from
https://www.cs.toronto.edu/~kriz/cifar.html) from a local folder, `user.data_dir`. Everything here is
plain PyTorch; the `ctx.` calls are where autotune applies the trial's settings and keeps the clocks.
"""

from __future__ import annotations

import functools
import pickle
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import autotune


@functools.lru_cache(maxsize=2)
def load_cifar(data_dir: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """uint8 images (N, 3, 32, 32) and int64 labels of the training and test batches (read once per process)."""
    root = Path(data_dir)

    def read(name: str) -> tuple[np.ndarray, np.ndarray]:
        with open(root / name, "rb") as f:
            d = pickle.load(f, encoding="bytes")
        return np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32), np.asarray(d[b"labels"])

    parts = [read(f"data_batch_{i}") for i in range(1, 6)]
    x_test, y_test = read("test_batch")
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    t = torch.from_numpy
    return t(x), t(y).long(), t(x_test), t(y_test).long()


class Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.skip = nn.Sequential() if stride == 1 and c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.skip(x))


class ResNet(nn.Module):
    """CIFAR-style ResNet: three stages of `blocks` basic blocks at width, 2 x width, 4 x width."""

    def __init__(self, width: int = 16, blocks: int = 1, n_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, c = [], width
        for stage, out in enumerate((width, 2 * width, 4 * width)):
            for i in range(blocks):
                layers.append(Block(c, out, 2 if stage > 0 and i == 0 else 1))
                c = out
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(c, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))


def augment(x: torch.Tensor) -> torch.Tensor:
    """Random crop (reflect-pad 4) and horizontal flip on the device, for the whole batch at once."""
    n, c, h, w = x.shape
    dev = x.device
    padded = F.pad(x, (4, 4, 4, 4), mode="reflect")
    rows = torch.randint(0, 9, (n, 1), device=dev) + torch.arange(h, device=dev)  # (n, h)
    cols = torch.randint(0, 9, (n, 1), device=dev) + torch.arange(w, device=dev)  # (n, w)
    out = padded[torch.arange(n, device=dev)[:, None, None, None], torch.arange(c, device=dev)[None, :, None, None],
                 rows[:, None, :, None], cols[:, None, None, :]]
    flip = torch.rand(n, device=dev) < 0.5
    return torch.where(flip[:, None, None, None], out.flip(3), out)


def fit(ctx: autotune.TrialContext) -> None:
    x, y, x_test, y_test = load_cifar(ctx.params["data_dir"])
    mean = x.float().mean((0, 2, 3), keepdim=True) / 255
    std = x.float().std((0, 2, 3), keepdim=True) / 255

    def normalize(batch: torch.Tensor) -> torch.Tensor:  # uint8 on the device -> float, per batch
        return (batch.float() / 255 - mean.to(batch.device)) / std.to(batch.device)

    model, _ = ctx.prepare(ResNet(width=ctx.params["width"], blocks=ctx.params["blocks"]))
    train = ctx.loader((x, y))
    test = ctx.loader((x_test, y_test), train=False)
    for _ in ctx.epochs():
        model.train()
        for xb, yb in train:
            with ctx.autocast():
                loss = F.cross_entropy(model(augment(normalize(xb))), yb, label_smoothing=0.1)
            ctx.backward(loss)
        ctx.model.eval()
        correct, loss_sum = 0, 0.0
        with torch.inference_mode(), ctx.autocast():
            for xb, yb in test:
                logits = ctx.model(normalize(xb)).float()
                loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
                correct += int((logits.argmax(1) == yb).sum())
        ctx.report(val_accuracy=correct / len(y_test), val_loss=loss_sum / len(y_test))
