"""Training one run on a trial context: `TrialContext` (what a training function `fit(ctx)` receives: settings,
clocks, stop rules), its records and result, acceleration settings applied (`_accel`), data, models, several
devices, throughput windows. No Optuna, no config files.

The names below are imported on first use (core/_lazy.py): importing one module of this package never
imports the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core._lazy import exports

if TYPE_CHECKING:
    from autotune.training._context import ContextMisuse, EpochRecord, OnEpoch, TrainResult, TrialContext
    from autotune.training._data import DATASETS, Dataset
    from autotune.training._distributed import cpu_cores, devices_wanted
    from autotune.training._models import MODELS
    from autotune.training._stops import Limits
    from autotune.training._throughput import Measurement, ProbeDone, ProbeWindow, RepeatedWindow

_NAMES = {
    "ContextMisuse": "_context",
    "EpochRecord": "_context",
    "OnEpoch": "_context",
    "TrainResult": "_context",
    "TrialContext": "_context",
    "Limits": "_stops",
    "Measurement": "_throughput",
    "ProbeDone": "_throughput",
    "ProbeWindow": "_throughput",
    "RepeatedWindow": "_throughput",
    "DATASETS": "_data",
    "Dataset": "_data",
    "MODELS": "_models",
    "cpu_cores": "_distributed",
    "devices_wanted": "_distributed",
}
__getattr__ = exports(__name__, _NAMES)
__all__ = ["ContextMisuse", "DATASETS", "Dataset", "EpochRecord", "Limits", "MODELS", "Measurement", "OnEpoch",
           "ProbeDone", "ProbeWindow", "RepeatedWindow", "TrainResult", "TrialContext", "cpu_cores", "devices_wanted"]
