"""What a compressed model weighs and costs: serialized size, non-zero parameters, validation metrics on
its inference device, median inference latency."""

from __future__ import annotations

import io
import statistics
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from autotune.training import Dataset, accel, tasks

LATENCY_WARMUP = 3
LATENCY_REPEATS = 15


def model_size_bytes(model: nn.Module) -> int:
    """Bytes of `torch.save(model.state_dict())`: what a deployed checkpoint weighs."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.getbuffer().nbytes


def _tensors(v: Any) -> Iterator[torch.Tensor]:
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from _tensors(x)


def params_nonzero(model: nn.Module) -> int:
    """Non-zero weights and biases (int8 ones counted by their integer values); BN statistics left out."""
    n = 0
    for key, v in model.state_dict().items():
        if key.endswith(("running_mean", "running_var", "num_batches_tracked", "scale", "zero_point")):
            continue
        for t in _tensors(v):
            if t.is_quantized:
                n += int(torch.count_nonzero(t.int_repr()))
            elif t.is_floating_point():
                n += int(torch.count_nonzero(t))
    # int8 Linear/conv keep weights in packed params, which state_dict exposes as (weight, bias) tuples above
    return n


def input_dtype(model: nn.Module) -> torch.dtype:
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32  # quantized models take fp32 and quantize at the input


class _Deployed(nn.Module):
    """`model` fed as deployed: each batch moved to its inference device and cast to its input dtype (a
    bf16/fp16-cast model takes bf16/fp16 inputs, an int8 one fp32 on the CPU). The trainer's evaluation
    (`tasks.evaluate`) runs it unchanged: no autocast, the validation data left where training put it."""

    def __init__(self, model: nn.Module, dev: torch.device) -> None:
        super().__init__()
        self.model, self.dev, self.dtype = model, dev, input_dtype(model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x.to(self.dev, self.dtype))


def val_metrics(model: nn.Module, ds: Dataset, x: torch.Tensor, y: torch.Tensor, batch_size: int,
                dev: torch.device) -> dict[str, float]:
    """The task's validation metrics (`tasks.evaluate`) of a compressed model on its inference device `dev`;
    (x, y) may live on another device (the training one), batches are moved one at a time."""
    return tasks.evaluate(_Deployed(model, dev), ds, x, y.to(dev), batch_size, dev)


def latency_ms(model: nn.Module, x: torch.Tensor, batch_size: int, dev: torch.device,
               warmup: int = LATENCY_WARMUP, repeats: int = LATENCY_REPEATS) -> float:
    """Median wall time of one forward pass on a batch of `batch_size`, after warm-up, synchronized."""
    reps = -(-batch_size // len(x))
    xb = x.repeat(reps, *([1] * (x.ndim - 1)))[:batch_size].to(dev, input_dtype(model)).contiguous()
    model.eval()
    times = []
    with torch.inference_mode():
        for _ in range(warmup):
            model(xb)
        for _ in range(repeats):
            t0 = accel.clock(dev)
            model(xb)
            times.append(accel.clock(dev) - t0)
    return statistics.median(times) * 1e3
