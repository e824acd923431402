"""The search itself, as Optuna sees it: the space (sample, decode), samplers, pruners (Optuna's and the Pareto ones),
learning-curve forecasts, and plain views of finished trials (`TrialSummary`, the front, the recommended one).

The names below are imported on first use (core/_lazy.py): importing one module of this package never
imports the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core._lazy import exports

if TYPE_CHECKING:
    from autotune.search._pruners import EPOCH_VALUES, PRUNERS, front_of, optuna_pruner, pareto_pruner
    from autotune.search._results import TrialSummary, best_trial, feasible, pareto_front, select, summarize
    from autotune.search._samplers import SAMPLERS, make_sampler
    from autotune.search._space import fixed_point, of_trial

_NAMES = {
    "TrialSummary": "_results",
    "best_trial": "_results",
    "feasible": "_results",
    "pareto_front": "_results",
    "select": "_results",
    "summarize": "_results",
    "EPOCH_VALUES": "_pruners",
    "PRUNERS": "_pruners",
    "front_of": "_pruners",
    "optuna_pruner": "_pruners",
    "pareto_pruner": "_pruners",
    "SAMPLERS": "_samplers",
    "make_sampler": "_samplers",
    "fixed_point": "_space",
    "of_trial": "_space",
}
__getattr__ = exports(__name__, _NAMES)
__all__ = ["EPOCH_VALUES", "PRUNERS", "SAMPLERS", "TrialSummary", "best_trial", "feasible", "fixed_point", "front_of",
           "make_sampler", "of_trial", "optuna_pruner", "pareto_front", "pareto_pruner", "select", "summarize"]
