"""The metric catalogue: every metric autotune measures or its built-in trainer reports, described once.

Each entry says which way is better, how the report labels it and the terminal shortens and formats it,
whether it is known after every epoch or only once training is over, and who produces it:
- `reported`: what a training function passes to `ctx.report` (the built-in one: `tasks.evaluate`);
- `clock`: measured by the trial context; a training function never reports these;
- `inference`: measured on the built-in trainer's model after `fit` (size, latency, non-zero weights);
- `compression`: what compressing that model cost and changed (compress/);
- `model`: read from the trained model (its parameter count).
`record` marks the fields of each epoch's record (EpochRecord: train_loss and the per-epoch clocks), every other
key of a stored epoch being a reported metric.
Config (allowed objectives and their directions), objective (what drives per-epoch pruning), the epoch record,
results, progress and report read this table; no other module keeps a list of metric names.
A user's training function may report further metrics (`metrics:` in the YAML); those are not here and
are shown by name with a generic format.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Direction = Literal["maximize", "minimize"]
Source = Literal["reported", "clock", "inference", "compression", "model"]


def _seconds(v: float) -> str:
    return f"{v:.2f}s"


def _plain(v: float) -> str:
    return f"{v:.4g}"


@dataclass(frozen=True)
class Metric:
    name: str
    direction: Direction | None  # which way is better; None: not a thing to optimize (the learning rate)
    label: str  # axis and legend text (report)
    short: str  # column header (terminal)
    fmt: Callable[[float], str]  # one value as text, with its unit
    per_epoch: bool  # known after every epoch (can drive per-epoch pruning) or only once training is over
    source: Source
    objective: bool = True  # may be named under `objectives:`
    task: str | None = None  # only this task has it (None: both)
    fraction: bool = False  # a share in [0, 1] where 1 is perfect (accuracy): the knee compares its error rate
    shown: bool = False  # shown in trial tables beside the objectives
    record: bool = False  # a field of each epoch's record (EpochRecord), not one of its reported `metrics`


def _m(name: str, direction: Direction | None, label: str, short: str, fmt: Callable[[float], str], per_epoch: bool,
       source: Source, **kw: Any) -> Metric:
    return Metric(name, direction, label, short, fmt, per_epoch, source, **kw)


CATALOGUE: dict[str, Metric] = {m.name: m for m in (
    # objectives (and clocks) in the order error messages list them
    _m("val_accuracy", "maximize", "validation accuracy", "acc", lambda v: f"{v:.4f}", True, "reported",
       task="classification", fraction=True, shown=True),
    _m("val_loss", "minimize", "validation loss", "loss", _plain, True, "reported"),
    # the epoch's mean training loss: the one a fit reports, else the context's mean over ctx.backward; shown by its
    # name (as a user's metric of that name was before it was catalogued)
    _m("train_loss", "minimize", "train_loss", "train_loss", _plain, True, "reported", objective=False, record=True),
    _m("epoch_time_s", "minimize", "epoch time (s)", "epoch", _seconds, True, "clock", objective=False, record=True),
    _m("train_time_s", "minimize", "training time (s)", "time", _seconds, True, "clock", shown=True, record=True),
    _m("samples_per_s", "maximize", "throughput (samples/s)", "samples/s", lambda v: f"{v:,.0f}", True, "clock",
       shown=True, record=True),
    _m("model_size_bytes", "minimize", "model size (bytes)", "size", lambda v: f"{v / 1024:.1f}KiB", False,
       "inference"),
    _m("inference_latency_ms", "minimize", "inference latency (ms)", "latency", lambda v: f"{v:.3f}ms", False,
       "inference"),
    _m("params_nonzero", "minimize", "non-zero parameters", "nonzero", _plain, False, "inference"),
    _m("model_params", "minimize", "model parameters", "params", _plain, False, "model"),  # the architecture's size
    # task regression (original units of the targets; val_r2 has none)
    _m("val_mse", "minimize", "validation MSE", "mse", _plain, True, "reported", task="regression"),
    _m("val_mae", "minimize", "validation MAE", "mae", _plain, True, "reported", task="regression"),
    _m("val_r2", "maximize", "validation R²", "r2", _plain, True, "reported", task="regression"),
    # measured, never objectives
    _m("data_wait_fraction", "minimize", "share of step time waiting for data", "wait", lambda v: f"{v:.1%}", True,
       "clock", objective=False, record=True),
    _m("compile_time_s", "minimize", "compile time (s)", "compile", _seconds, False, "clock", objective=False),
    _m("lr", None, "learning rate", "lr", _plain, True, "clock", objective=False, record=True),
    # the trial's peak memory and energy so far (training/context/memory.py, energy.py): shown where measured
    _m("peak_memory_mb", "minimize", "peak memory (MB)", "memory", lambda v: f"{v:,.0f}MB", True, "clock",
       shown=True, record=True),
    _m("energy_j", "minimize", "energy (J)", "energy", lambda v: f"{v:,.1f}J", True, "clock", shown=True,
       record=True),
    _m("val_accuracy_before_compress", "maximize", "validation accuracy before compression", "acc before",
       lambda v: f"{v:.4f}", False, "compression", objective=False, task="classification", fraction=True),
    _m("compress_time_s", "minimize", "compression time (s)", "compress", _seconds, False, "compression",
       objective=False),
    _m("finetune_time_s", "minimize", "fine-tuning time after pruning (s)", "finetune", _seconds, False,
       "compression", objective=False),
)}

# metric -> natural direction, for every metric that may be an objective
DIRECTIONS: dict[str, str] = {m.name: str(m.direction) for m in CATALOGUE.values() if m.objective}
REPORTED = tuple(m.name for m in CATALOGUE.values() if m.source == "reported")  # a training function's ctx.report
CLOCKS = tuple(m.name for m in CATALOGUE.values() if m.source == "clock")  # never reported by a training function
INFERENCE = tuple(m.name for m in CATALOGUE.values() if m.source == "inference" and m.objective)
PER_EPOCH = tuple(m.name for m in CATALOGUE.values() if m.per_epoch)  # in each epoch's record
FINAL_ONLY = tuple(m.name for m in CATALOGUE.values() if not m.per_epoch)  # known only once training is over
SHOWN = tuple(m.name for m in CATALOGUE.values() if m.shown)
EPOCH_FIELDS = tuple(m.name for m in CATALOGUE.values() if m.record)  # EpochRecord's measured fields, in its order


def task_metrics(task: str) -> tuple[str, ...]:
    """The objectives only `task` has (classification: val_accuracy); every other metric both tasks measure."""
    return tuple(m.name for m in CATALOGUE.values() if m.task == task and m.objective)


def per_epoch(metric: str) -> bool:
    """Known after every epoch: a catalogue metric marked so, or a user's metric (reported each epoch)."""
    m = CATALOGUE.get(metric)
    return m.per_epoch if m is not None else True


def is_quality(metric: str) -> bool:
    """A measure of the model's quality each epoch (accuracy, a loss, a user's metric), not a clock or a size."""
    m = CATALOGUE.get(metric)
    return m is None or (m.source == "reported")


def is_fraction(metric: str) -> bool:
    m = CATALOGUE.get(metric)
    return m is not None and m.fraction


def label(metric: str) -> str:
    m = CATALOGUE.get(metric)
    return m.label if m is not None else metric


def short(metric: str) -> str:
    m = CATALOGUE.get(metric)
    return m.short if m is not None else metric


def fmt(metric: str, value: Any) -> str:
    """One value with its unit; '-' for a missing or non-finite one."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        return "-"
    m = CATALOGUE.get(metric)
    if m is None:  # a user's metric: seconds when its name says so
        return _seconds(float(value)) if metric.endswith("_s") else _plain(float(value))
    return m.fmt(float(value))


def shown_with(objectives: list[str]) -> list[str]:
    """Table columns: the objectives first, then the catalogue's always-shown metrics."""
    return list(dict.fromkeys([*objectives, *SHOWN]))


__all__ = ["CATALOGUE", "CLOCKS", "DIRECTIONS", "EPOCH_FIELDS", "FINAL_ONLY", "INFERENCE", "Metric", "PER_EPOCH",
           "REPORTED", "SHOWN", "fmt", "is_fraction", "is_quality", "label", "per_epoch", "short", "shown_with",
           "task_metrics"]
