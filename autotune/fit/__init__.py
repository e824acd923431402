"""One training run from a config: the trainer's job for a point of the space (`job_for`, the seed, the training
function), the checks before anything trains (`preflight`), the trainer (`TrainJob` -> `TrainResult`, built-in
or the user's `fit(ctx)`), and one configuration trained outside any study (`train`). No Optuna here.

The names below are imported on first use (core/_lazy.py): importing one module of this package never
imports the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core._lazy import exports

if TYPE_CHECKING:
    from autotune.fit._job import fit_name, job_for, load_fit, searched_keys, trial_seed
    from autotune.fit._preflight import preflight
    from autotune.fit._train_one import one_job, train
    from autotune.fit._trainer import BuiltinFit, Fit, TrainJob

_NAMES = {
    "BuiltinFit": "_trainer",
    "Fit": "_trainer",
    "TrainJob": "_trainer",
    "fit_name": "_job",
    "job_for": "_job",
    "load_fit": "_job",
    "searched_keys": "_job",
    "trial_seed": "_job",
    "preflight": "_preflight",
    "one_job": "_train_one",
    "train": "_train_one",
}
__getattr__ = exports(__name__, _NAMES)
__all__ = ["BuiltinFit", "Fit", "TrainJob", "fit_name", "job_for", "load_fit", "one_job", "preflight", "searched_keys",
           "train", "trial_seed"]
