"""From a config and a plan (fit/plan.py) to the trainer's job: the training function, the settings, the limits.

What a study's trial, `autotune.train`, `autotune profile` and `autotune speed` share; nothing here knows Optuna.
"""

from __future__ import annotations

from typing import Any

from autotune.core import load_factory
from autotune.fit import trainer
from autotune.fit.plan import TrialPlan
from autotune.spec import RunConfig


def load_fit(cfg: RunConfig) -> trainer.Fit | None:
    """The user's training function named by `trainer:` (None: the built-in trainer)."""
    if cfg.trainer is None:
        return None
    return load_factory(cfg.trainer, cfg.file, "trainer", near=cfg.source)  # type: ignore


def fit_name(cfg: RunConfig, fit: trainer.Fit | None) -> str:
    if cfg.trainer is not None:
        return cfg.trainer
    if fit is None:
        return "the built-in trainer"
    return f"{getattr(fit, '__module__', '?')}:{getattr(fit, '__qualname__', type(fit).__name__)}"


def job_for(cfg: RunConfig, plan: TrialPlan, fit: trainer.Fit | None = None, probe: Any = None) -> trainer.TrainJob:
    """The trainer's job for a plan: its settings, user parameters (a dict: a job is pickled to the ranks of a
    several-device trial), seed, limits, searched and fixed keys; `fit` (None: the built-in trainer); `probe`: a
    throughput.ProbeWindow timing its first steps (the speed probe)."""
    return trainer.TrainJob(
        config=cfg, settings=plan.settings, seed=plan.seed, limits=plan.limits,
        measure_inference=plan.measure_inference, fit=fit, user_params=dict(plan.user), probe=probe,
        searched=plan.searched, fixed=plan.fixed)

__all__ = ["fit_name", "job_for", "load_fit"]
