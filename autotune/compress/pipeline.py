"""The trainer's entry point: prune, fine-tune and quantize a copy of the trained model, then measure it.

The steps, in order: prune (masks), fine-tune with the masks held, make the masks permanent, cut zeroed
channels out (`ln_structured` on an `nn.Sequential`); QAT fine-tuning or post-training quantization; then
on the inference device: the task's validation metrics, serialized size, non-zero parameters and latency.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from autotune.compress import prune, quantize
from autotune.compress.measure import latency_ms, model_size_bytes, params_nonzero, val_metrics
from autotune.compress.support import infer_device
from autotune.core import TrialStopped
from autotune.spec import Settings
from autotune.training import Dataset, accel

CALIBRATION_BATCHES = 8  # training batches the static int8 observers see
FINETUNE_LR_FACTOR = 0.1  # fine-tuning after pruning runs at a tenth of the peak lr, constant

Finetune = Callable[[nn.Module, int, bool], float]  # (model, epochs, qat) -> seconds spent (trainer.BuiltinFit)


@dataclass
class Compressed:
    model: nn.Module
    val_accuracy: float
    val_loss: float
    finetune_time_s: float
    extra: dict[str, Any] = field(default_factory=dict)


def compress_and_measure(model: nn.Module, settings: Settings, train_dev: torch.device,
                         calibration: quantize.Calibration, ds: Dataset, x_val: torch.Tensor, y_val: torch.Tensor,
                         val_accuracy: float, val_loss: float, finetune: Finetune, epoch: int) -> Compressed:
    """Prune, fine-tune, quantize a copy of the trained model; measure it. The trained model is left as is.
    `x_val` is normalized (model-ready), on the training device like `y_val`."""
    s = settings
    t0 = time.perf_counter()
    m, pruned, shrunk, finetune_time_s = _pruned_copy(model, s, finetune, x_val)
    dev = infer_device(s, train_dev)
    q = s["quantize"]
    if s["qat"]:  # QAT as fine-tuning of the trained model (the stable way): fake int8 forwards, then convert
        m = quantize.prepare_qat(m)
        finetune_time_s += finetune(m, max(1, s["finetune_epochs"]), True)
    try:
        m = quantize.quantize_model(m, q, s["qat"], calibration, dev)
        if bool(pruned) or q != "none" or s["qat"]:
            metrics = val_metrics(m, ds, x_val, y_val, s["eval_batch_size"], dev)
            val_loss, val_acc = metrics["val_loss"], metrics["val_accuracy"]
        else:
            val_acc = val_accuracy  # nothing changed: the last epoch's accuracy stands
        lat = latency_ms(m, x_val, s["infer_batch_size"], dev)
    except (RuntimeError, NotImplementedError, AssertionError) as e:  # e.g. a user model torch.ao cannot convert
        if accel.is_oom(e):
            raise
        raise TrialStopped("unsupported", epoch, f"quantize {q}: {type(e).__name__}: "
                                                 f"{str(e).splitlines()[0] if str(e) else ''}"[:300]) from None
    extra = {
        "val_accuracy_before_compress": val_accuracy,
        "model_size_bytes": model_size_bytes(m),
        "params_nonzero": params_nonzero(m),
        "inference_latency_ms": lat,
        "finetune_time_s": finetune_time_s,
        "compress_time_s": time.perf_counter() - t0,
        "pruned_shrunk": shrunk,
    }
    return Compressed(model=m, val_accuracy=val_acc, val_loss=val_loss, finetune_time_s=finetune_time_s,
                      extra=extra)


def _pruned_copy(model: nn.Module, s: Settings, finetune: Finetune,
                 x_val: torch.Tensor) -> tuple[nn.Module, list[nn.Module], bool, float]:
    """(a pruned, fine-tuned, shrunk where it can be copy; the pruned modules; shrunk?; fine-tune seconds)."""
    m = copy.deepcopy(model).to(memory_format=torch.contiguous_format)
    pruned = prune.prune_model(m, s["prune_method"], s["prune_amount"])
    if not pruned:
        return m, pruned, False, 0.0
    finetune_time_s = finetune(m, s["finetune_epochs"], False) if s["finetune_epochs"] > 0 else 0.0
    prune.make_permanent(pruned)
    small = None
    if s["prune_method"] == "ln_structured":
        small = prune.shrink(m, x_val[:64].to(next(m.parameters()).device))
    return (small if small is not None else m), pruned, small is not None, finetune_time_s


def calibration_batches(batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                        n: int = CALIBRATION_BATCHES) -> Callable[[], Iterator[torch.Tensor]]:
    """The first `n` training batches' inputs, drawn when static quantization asks for them."""
    return lambda: (xb for xb, _ in itertools.islice(iter(batches), n))
