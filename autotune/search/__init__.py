"""The search itself, as Optuna sees it: the space (sample, decode), samplers, pruners (Optuna's and the Pareto ones),
learning-curve forecasts, the Pareto math on plain points (pareto.py), and plain views of finished trials
(`TrialSummary`, the front, the recommended one)."""

from __future__ import annotations

from autotune.search.pareto import nondominated_ranks
from autotune.search.pruners import EPOCH_VALUES, PRUNERS, check_front_gain_in, front_of, optuna_pruner, pareto_pruner
from autotune.search.results import TrialSummary, best_trial, feasible, lr_scaling_text, pareto_front, select, summarize
from autotune.search.sampler_kinds import SAMPLERS, SamplerKind
from autotune.search.samplers import make_sampler
from autotune.search.space import fixed_point, of_trial

__all__ = [
    "EPOCH_VALUES", "PRUNERS", "SAMPLERS", "TrialSummary", "best_trial", "check_front_gain_in", "feasible",
    "fixed_point", "front_of", "lr_scaling_text", "make_sampler", "nondominated_ranks", "of_trial", "optuna_pruner",
    "SamplerKind", "pareto_front", "pareto_pruner", "select", "summarize",
]
