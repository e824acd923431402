"""One training run from a config: the trainer's job for a point of the space (`job_for`, the seed, the training
function), the checks before anything trains (`preflight`), the trainer (`TrainJob` -> `TrainResult`, built-in
or the user's `fit(ctx)`), one configuration trained outside any study (`train`), and where a study's trials
train (`Backend`: `REAL`, or a replay's stand-in). No Optuna here."""

from __future__ import annotations

from autotune.fit.backend import REAL, Backend
from autotune.fit.checks import notes, preflight
from autotune.fit.job import fit_name, job_for, load_fit, searched_keys, trial_seed
from autotune.fit.train_one import one_job, train
from autotune.fit.trainer import BuiltinFit, Fit, TrainJob

__all__ = [
    "REAL", "Backend", "BuiltinFit", "Fit", "TrainJob", "fit_name", "job_for", "load_fit", "notes", "one_job",
    "preflight", "searched_keys", "train", "trial_seed",
]
