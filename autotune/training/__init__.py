"""Training one run on a trial context: `TrialContext` (what a training function `fit(ctx)` receives: settings,
clocks, stop rules; context/), `TrainingPlan` (what a context trains, decided
before it starts), `TrialPort` (what autotune's own trainer and framework adapters tell a context), its records and
result, acceleration settings applied (accel.py), datasets (data/), models, optimizers, tasks, several
devices (distributed/), the speed probe's measurement windows (throughput.py). No Optuna, no config files.

Other packages import from here: the names below, and the modules `accel`, `models`, `optimizers`, `tasks`,
`throughput` and the subpackages `data`, `distributed` (each with its own names)."""

from __future__ import annotations

from autotune.training.context.applied import BY_CONTEXT, Applied
from autotune.training.context.energy import unavailable as energy_unavailable
from autotune.training.context.limits import Limits, projected_time_s
from autotune.training.context.loaders import Batches
from autotune.training.context.memory import unavailable as memory_unavailable
from autotune.training.context.misuse import ContextMisuse
from autotune.training.context.plan import Threads, TrainingPlan
from autotune.training.context.port import TrialPort, refuse_devices
from autotune.training.context.results import EpochRecord, OnEpoch, Shaped, TrainResult, shaped_by
from autotune.training.context.trial import TrialContext, run_fit, trial_session, unsupported_combination
from autotune.training.data import DATASETS, Dataset, augment
from autotune.training.distributed import cpu_cores, devices_wanted
from autotune.training.models import MODELS
from autotune.training.throughput import Measurement, ProbeDone, ProbeWindow, RepeatedWindow

__all__ = [
    "BY_CONTEXT", "Applied", "Batches", "ContextMisuse", "DATASETS", "Dataset", "EpochRecord", "Limits", "MODELS",
    "Measurement", "OnEpoch", "ProbeDone", "ProbeWindow", "RepeatedWindow", "Shaped", "Threads", "TrainResult",
    "TrainingPlan", "TrialContext", "TrialPort",
    "augment", "cpu_cores", "devices_wanted", "energy_unavailable", "memory_unavailable", "projected_time_s",
    "refuse_devices", "run_fit", "shaped_by", "trial_session", "unsupported_combination",
]
