"""What a multi-objective sampler learns from a trial stopped early.

Optuna's samplers for several objectives give a pruned trial no values (`trial.report` cannot be called there), so
TPE ranks every stopped trial below every completed one: the regions a Pareto pruner stops in, the slow learners
at the front's accurate end among them, become the regions it avoids. Yet a trial stopped after epoch k of a run
whose learning rate does not depend on the run's length *is* the trial with `epochs: k`: the same settings, the
same first k epochs, the same objective values after them. `StoppedAsShorter` shows the sampler that equivalent
completed trial (params with epochs = k, values those recorded after epoch k) wherever it is true, and the stopped
trial as Optuna stores it everywhere else. Only the sampler's view changes: the study, its front, `best` and the
report see the stored trials.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Sequence
from typing import Any

import optuna
from optuna.distributions import IntDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.core import ConfigError
from autotune.core import optuna_compat as compat
from autotune.spec import Settings, TrialRecord

EPOCHS = "epochs"
# settings whose training differs with the run's length (a truncated run is not the shorter run) or whose final
# value is measured after training (compression): a stopped trial with any of these is not a shorter trial
_LENGTH_FREE = {"lr_schedule": ("constant",), "prune_method": ("none",), "quantize": ("none",), "qat": (False,),
                "finetune_epochs": (0,)}


def length_free(settings: Settings) -> bool:
    """True when stopping this run after epoch k gives the run with `epochs: k` (a constant learning rate, no
    compression after training)."""
    return all(settings.get(k, ok[0]) in ok for k, ok in _LENGTH_FREE.items())


def as_shorter(t: FrozenTrial, settings_of: Callable[[dict[str, Any]], Settings]) -> FrozenTrial | None:
    """The completed trial a stopped trial `t` equals (epochs = the epochs it ran, its values after the last of
    them), or None where that is not true or not known."""
    curve = TrialRecord.of(t).epoch_values
    dist = t.distributions.get(EPOCHS)
    if t.state != TrialState.PRUNED or not curve or not isinstance(dist, IntDistribution):
        return None
    k, values = len(curve), [float(v) for v in curve[-1]]
    if not (dist.low <= k <= dist.high and (k - dist.low) % dist.step == 0) or not all(map(math.isfinite, values)):
        return None
    try:
        if not length_free(settings_of(dict(t.params))):
            return None
    except (KeyError, TypeError, ValueError, ConfigError):  # (params the catalogue no longer takes)
        return None
    return FrozenTrial(number=t.number, state=TrialState.COMPLETE, value=None, values=values,
                       datetime_start=t.datetime_start, datetime_complete=t.datetime_complete,
                       params={**t.params, EPOCHS: k}, distributions=t.distributions, user_attrs=t.user_attrs,
                       system_attrs=t.system_attrs, intermediate_values=t.intermediate_values,
                       trial_id=compat.trial_id(t))


class _SamplerView(compat.StudyView):
    """The study as the sampler sees it: stopped trials that equal shorter ones shown as those (cached by id: a
    finished trial does not change)."""

    def __init__(self, study: optuna.Study, convert: Callable[[FrozenTrial], FrozenTrial | None],
                 cache: dict[tuple[int, int], FrozenTrial | None], n_objectives: int) -> None:
        super().__init__(study)
        self._convert, self._cache, self._n = convert, cache, n_objectives

    def _shown(self, t: FrozenTrial) -> FrozenTrial:
        if t.state != TrialState.PRUNED:
            return t
        key = (id(compat.storage_of(self.study)), compat.trial_id(t))
        if key not in self._cache:
            c = self._convert(t)
            self._cache[key] = c if c is not None and len(c.values) == self._n else None
        return self._cache[key] or t

    def shown_trials(self, deepcopy: bool, states: Container[TrialState] | None, use_cache: bool) -> list[FrozenTrial]:
        trials = compat.study_trials(self.study, deepcopy=deepcopy, use_cache=use_cache)
        shown = [self._shown(t) for t in trials]
        return shown if states is None else [t for t in shown if t.state in states]


class Delegating(optuna.samplers.BaseSampler):
    """A sampler around `inner`: the trial hooks and the seed go to it unchanged (a wrapper changes how it samples)."""

    inner: optuna.samplers.BaseSampler

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()


class StoppedAsShorter(Delegating):
    """`inner` (a multi-objective sampler), shown each trial stopped early as the shorter completed trial it equals
    (`as_shorter`); `settings_of(params)` gives a trial's settings (the fixed ones included)."""

    def __init__(self, inner: optuna.samplers.BaseSampler,
                 settings_of: Callable[[dict[str, Any]], Settings]) -> None:
        self.inner = inner
        self._settings_of = settings_of
        self._cache: dict[tuple[int, int], FrozenTrial | None] = {}

    def _view(self, study: optuna.Study) -> Any:
        return _SamplerView(study, lambda t: as_shorter(t, self._settings_of), self._cache, len(study.directions))

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, Any]:
        return self.inner.infer_relative_search_space(self._view(study), trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, Any]) -> dict[str, Any]:
        return self.inner.sample_relative(self._view(study), trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: Any) -> Any:
        return self.inner.sample_independent(self._view(study), trial, param_name, param_distribution)
