"""Compression of a trained model and what it costs, and transfer learning; runs after `fit`.

| module | job |
|---|---|
| `support` | what can run where: the inference device, `unsupported` combinations, `check_config` |
| `transfer` | checkpoints (`model.checkpoint`), `freeze`, the distillation teacher and its loss |
| `prune` | pruning masks, making them permanent, `shrink` (cutting zeroed channels out) |
| `quantize` | int8 (dynamic, static, QAT) and bf16/fp16 casts; the `QUANTIZERS` registry |
| `measure` | size, non-zero parameters, validation metrics on the inference device, latency |
| `pipeline` | the trainer's entry point: `compress_and_measure` runs the steps above on a copy |

The names below are what the trainer, the study and the settings catalogue (QUANTIZERS) use; benches and
tests reach the rest through the submodules."""

from __future__ import annotations

from autotune.compress import measure, pipeline, prune, quantize, support, transfer
from autotune.compress.pipeline import FINETUNE_LR_FACTOR, Compressed, calibration_batches, compress_and_measure
from autotune.compress.quantize import QUANTIZERS
from autotune.compress.support import check_config, unsupported
from autotune.compress.transfer import distill_loss, load_checkpoint, load_teacher

__all__ = [
    "Compressed", "FINETUNE_LR_FACTOR", "QUANTIZERS", "calibration_batches", "check_config", "compress_and_measure",
    "distill_loss",
    "load_checkpoint", "load_teacher", "measure", "pipeline", "prune", "quantize", "support", "transfer",
    "unsupported",
]
