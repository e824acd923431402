"""One training run from a config: its plan (`TrialPlan`: the point, and its training half handed to the trial
context as it is), the training function a config names (`load_fit`), the checks before anything trains
(`preflight`), the trainer (a plan -> `TrainResult`, built-in or the user's `fit(ctx)`), one configuration trained
outside any study (`train`), and where a study's trials train (`Backend`: `REAL`, or a replay's stand-in). No
Optuna here."""

from __future__ import annotations

from autotune.fit.backend import REAL, Backend
from autotune.fit.checks import notes, preflight
from autotune.fit.function import fit_name, load_fit
from autotune.fit.plan import TrialPlan, trial_seed
from autotune.fit.train_one import one_plan, train
from autotune.fit.trainer import BuiltinFit, Fit
from autotune.training import Threads, TrainingPlan

__all__ = [
    "REAL", "Backend", "BuiltinFit", "Fit", "Threads", "TrainingPlan", "TrialPlan", "fit_name", "load_fit", "notes",
    "one_plan", "preflight", "train", "trial_seed",
]
