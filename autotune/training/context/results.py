"""What a trial measured: one record per epoch (`EpochRecord`) and the run's result (`TrainResult`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from autotune.spec import EPOCH_FIELDS


@dataclass
class EpochRecord:
    """One epoch as the context measured it, with the metrics the training function reported. Its measured fields
    are the metric catalogue's `record` ones (spec.EPOCH_FIELDS; tests/spec_tests/test_metrics.py keeps them equal)."""

    epoch: int
    train_loss: float  # mean training loss (reported `train_loss`, else measured from ctx.backward); NaN if none
    epoch_time_s: float  # training time of this epoch (evaluation left out)
    train_time_s: float  # cumulative, compile included unless time_excludes_compile
    samples_per_s: float
    data_wait_fraction: float
    lr: float
    peak_memory_mb: float | None = None  # the trial's peak so far (memory.py); None: not measured here
    energy_j: float | None = None  # the trial's training energy so far (energy.py); None: no source here
    metrics: dict[str, float] = field(default_factory=dict)  # what ctx.report received (val_accuracy, val_f1...)
    # the epochs the trial plans (not measured, not stored in the history): its `epochs`, or a framework's own count
    # when the trial left epochs to the user's recipe; the study's own stop rules read it (0: not known)
    epochs_planned: int = field(default=0, compare=False)

    def __getattr__(self, name: str) -> float:  # rec.val_accuracy reads a reported metric
        metrics = self.__dict__.get("metrics", {})
        if name in metrics:
            return float(metrics[name])
        raise AttributeError(name)

    def value(self, name: str) -> float | None:
        """A metric at this epoch, as `as_dict()` stores it: a measured field (spec.EPOCH_FIELDS) where it was
        measured, else what ctx.report received; None: neither (not known at this epoch)."""
        measured = getattr(self, name) if name in EPOCH_FIELDS else None
        found = measured if measured is not None else self.metrics.get(name)
        return None if found is None else float(found)

    def as_dict(self) -> dict[str, Any]:
        """Flat: what the trial's `history` user attr stores (the report and pruners read these keys)."""
        # the catalogue's record fields, in its order; a meter with nothing to read is absent, never zero
        measured = {k: v for k in EPOCH_FIELDS if (v := getattr(self, k)) is not None}
        return {"epoch": self.epoch, "train_loss": measured.pop("train_loss"), **self.metrics, **measured}


OnEpoch = Callable[[EpochRecord], None]


@dataclass(frozen=True)
class Shaped:
    """What shaped a run that stopped or failed after it began training (a trained run's `TrainResult` holds the
    same): the settings that took no effect (`not_applied`, `unused`), what the user's recipe held for those it
    left to it, the rates a chosen lr gave the fit's own optimizer. A stopped or failed trial stores these as a
    finished one does (its settings are what trained, not the plan's catalogue defaults)."""

    not_applied: dict[str, str]
    unused: list[str]
    recipe: dict[str, Any]
    effective_lrs: tuple[list[float], list[float]] | None = None


SHAPED = "_autotune_shaped"  # the attribute of a fit's exception that carries its run's `Shaped`


def shaped_by(exc: BaseException) -> Shaped | None:
    """The `Shaped` a run that raised `exc` left on it (None: it had not begun training, or it is not known)."""
    found = getattr(exc, SHAPED, None)
    return found if isinstance(found, Shaped) else None


@dataclass
class TrainResult:
    """What one training run measured: final metrics, clocks, per-epoch history, the trained model."""

    final: dict[str, float]  # the last epoch's reported metrics, then what fit returned, then post-training steps
    train_time_s: float
    samples_per_s: float
    compile_time_s: float
    data_wait_fraction: float
    epochs_run: int
    device: str
    precision: str
    history: list[EpochRecord] = field(default_factory=list)
    stopped_early_at: int | None = None  # epoch at which early stopping ended training
    loss_scale: float | None = None  # the GradScaler's final scale (fp16 only)
    not_applied: dict[str, str] = field(default_factory=dict)  # setting -> why it could not take effect here
    unused: list[str] = field(default_factory=list)  # settings (searched or not) whose values did not shape training
    # (the fit's optimizer's own group lrs, those lrs times a chosen lr) when that multiplier took effect
    effective_lrs: tuple[list[float], list[float]] | None = None
    model_params: int = 0  # parameters of the trained model (the architecture's size, for model.* searches)
    peak_memory_mb: float | None = None  # over the whole training (the last epoch's record); None: not measured
    energy_j: float | None = None  # None: no energy source here
    meters: dict[str, str] = field(default_factory=dict)  # metric -> what measured it, or why it is absent
    # settings the trial did not choose that a framework's loop took from the user's code or its own defaults:
    # setting -> the value it held (the Trainer's lr_scheduler_type "linear", say); not autotune's, not in `settings`
    recipe: dict[str, Any] = field(default_factory=dict)
    model: nn.Module | None = field(default=None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)  # post-training metrics (compression)
    compressed_model: nn.Module | None = field(default=None, repr=False)

    @property
    def val_accuracy(self) -> float:
        return float(self.final.get("val_accuracy", math.nan))

    @property
    def val_loss(self) -> float:
        return float(self.final.get("val_loss", math.nan))

    def metrics(self) -> dict[str, float]:
        out = {**self.final, "train_time_s": self.train_time_s, "samples_per_s": self.samples_per_s,
               "compile_time_s": self.compile_time_s, "data_wait_fraction": self.data_wait_fraction}
        if self.model_params:
            out["model_params"] = float(self.model_params)
        for key in ("peak_memory_mb", "energy_j"):
            if (v := getattr(self, key)) is not None:
                out[key] = v
        out.update(self.extra)
        return out


__all__ = ["EpochRecord", "OnEpoch", "TrainResult"]
