"""One configuration trained outside any study (`autotune.train`, `autotune profile`, a teacher's retrain): fixed
settings plus the given ones, the same training function, settings and clocks as a trial."""

from __future__ import annotations

from typing import Any

from autotune.fit import trainer
from autotune.fit.checks import preflight
from autotune.fit.job import job_for, load_fit
from autotune.fit.plan import TrialPlan, trial_seed
from autotune.spec import RunConfig, check_params, merge
from autotune.training import TrainResult


def one_job(cfg: RunConfig, params: dict[str, Any] | None = None, *, fit: trainer.Fit | None = None,
        seed: int | None = None, measure_inference: bool | None = True) -> trainer.TrainJob:
    """The job `train` runs: the config's `train:` settings (searched ones at their defaults) with `params` over
    them (user parameters as `user.NAME`), set explicitly; `fit` (default: the config's `trainer:`, else the
    built-in trainer); `seed` (default: trial 0's, `study.trial_seed`, else study.seed x 100003)."""
    given = check_params(params or {}, "params")
    values = merge(cfg.train, overrides=given)
    seed = trial_seed(cfg, 0) if seed is None else seed
    plan = TrialPlan.of(cfg, values, seed, measure_inference=measure_inference, study_rules=False,
                        fixed=frozenset(cfg.train) | frozenset(given))
    return job_for(cfg, plan, fit=fit or load_fit(cfg))


def train(cfg: RunConfig, params: dict[str, Any] | None = None, *, fit: trainer.Fit | None = None,
          seed: int | None = None) -> TrainResult:
    """Check the config (`preflight`), then train `one_job(cfg, params, fit=fit, seed=seed)` once, inference metrics
    measured."""
    preflight(cfg)
    return trainer.train(one_job(cfg, params, fit=fit, seed=seed))


__all__ = ["one_job", "train"]
