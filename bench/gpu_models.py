"""The GPU check's resnet, given to autotune as a user model factory (`model.factory: bench.gpu_models:resnet_small`).

A CIFAR-style ResNet (3x3 stem, `blocks` basic blocks per stage, stages of `widths` channels, each after the first
halving the image, global average pooling, one linear head): enough arithmetic per sample that a fast GPU is not
launch-bound at batch 256+, small enough to compile in seconds. Once autotune has a built-in `resnet` model, the
check switches to it (`model: {name: resnet, ...}`) and this file goes.
"""

from __future__ import annotations

from torch import Tensor, nn


class BasicBlock(nn.Module):
    """conv-bn-relu-conv-bn plus the input (a strided 1x1 conv where the shape changes), then relu."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(c_out),
            nn.ReLU(inplace=True),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
        )
        self.skip: nn.Module = nn.Identity() if stride == 1 and c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.body(x) + self.skip(x))


def resnet_small(input_shape: tuple[int, ...], n_classes: int, widths: tuple[int, ...] = (64, 128, 256),
                 blocks: int = 2) -> nn.Module:
    """widths (64, 128, 256), 2 blocks: 14 conv layers, 2.8 M parameters, 0.6 GFLOP per 32x32x3 image forward."""
    if len(input_shape) != 3:
        raise ValueError(f"resnet_small needs image inputs (C, H, W); got shape {tuple(input_shape)}")
    layers: list[nn.Module] = [nn.Conv2d(input_shape[0], widths[0], 3, padding=1, bias=False),
                               nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True)]
    c = widths[0]
    for stage, w in enumerate(widths):
        for b in range(blocks):
            layers.append(BasicBlock(c, w, stride=2 if stage > 0 and b == 0 else 1))
            c = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, n_classes)]
    return nn.Sequential(*layers)
