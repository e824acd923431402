"""One configuration trained outside any study (`autotune.train`, `autotune profile`, a teacher's retrain): fixed
settings plus the given ones, the same training function, settings and clocks as a trial."""

from __future__ import annotations

from typing import Any

from autotune.fit import trainer
from autotune.fit.checks import preflight
from autotune.fit.function import load_fit
from autotune.fit.plan import TrialPlan, trial_seed
from autotune.spec import RunConfig, check_params, merge
from autotune.training import TrainResult


def one_plan(cfg: RunConfig, params: dict[str, Any] | None = None, *, seed: int | None = None,
             measure_inference: bool | None = True) -> TrialPlan:
    """The plan `train` runs: the config's `train:` settings (searched ones at their defaults) with `params` over
    them (user parameters as `user.NAME`), set explicitly; `seed` (default: trial 0's, `study.trial_seed`, else
    study.seed x 100003)."""
    given = check_params(params or {}, "params")
    values = merge(cfg.train, overrides=given)
    seed = trial_seed(cfg, 0) if seed is None else seed
    return TrialPlan.of(cfg, values, seed, measure_inference=measure_inference, study_rules=False,
                        fixed=frozenset(cfg.train) | frozenset(given))


def train(cfg: RunConfig, params: dict[str, Any] | None = None, *, fit: trainer.Fit | None = None,
          seed: int | None = None) -> TrainResult:
    """Check the config (`preflight`), then train `one_plan(cfg, params, seed=seed)` once with `fit` (default: the
    config's `trainer:`, else the built-in trainer), inference metrics measured."""
    preflight(cfg)
    return trainer.train(one_plan(cfg, params, seed=seed).training, fit or load_fit(cfg))


__all__ = ["one_plan", "train"]
