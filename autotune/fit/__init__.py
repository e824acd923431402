"""One training run from a config: its plan (`TrialPlan`: settings, seed, device, threads, limits), the trainer's
job for it (`job_for`, the training function), the checks before anything trains (`preflight`), the trainer
(`TrainJob` -> `TrainResult`, built-in or the user's `fit(ctx)`), one configuration trained outside any study
(`train`), and where a study's trials train (`Backend`: `REAL`, or a replay's stand-in). No Optuna here."""

from __future__ import annotations

from autotune.fit.backend import REAL, Backend
from autotune.fit.checks import notes, preflight
from autotune.fit.job import fit_name, job_for, load_fit
from autotune.fit.plan import Threads, TrialPlan, trial_seed
from autotune.fit.train_one import one_job, train
from autotune.fit.trainer import BuiltinFit, Fit, TrainJob

__all__ = [
    "REAL", "Backend", "BuiltinFit", "Fit", "Threads", "TrainJob", "TrialPlan", "fit_name", "job_for", "load_fit",
    "notes", "one_job", "preflight", "train", "trial_seed",
]
