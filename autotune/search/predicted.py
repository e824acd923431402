"""A sampler given each candidate's predicted objectives: `study.candidates: K`.

A trial's training time is nearly a function of its settings (the model's size, the batch, the precision, the
epochs), and the study has already measured it for every trial that ran an epoch, the stopped ones included; its
accuracy after k epochs is in every trial's recorded curve. Optuna's samplers for several objectives use none of
that before a trial runs: MO-TPE proposes one point from the trials' parameters and ranks alone. `PredictedFront`
asks the inner sampler (TPE, shown stopped trials as the shorter trials they equal: search/credit.py) for K
candidates instead of one, predicts each one's objectives from every epoch of every trial recorded so far (a
random forest: settings and epochs in, objective values out; the spread of its trees gives an optimistic value),
and runs the candidate whose optimistic point adds most to the hypervolume of the front so far (none adds: the
inner sampler's first). The inner sampler still explores; the prediction only chooses among its proposals.

Its price is the sampler's own time, 0.1-0.2 s per trial after a few hundred trials on a 2-core CPU (TPE asked K
times, the forest refit): on MNIST-1D, whose trials last about 0.3 s, that outweighs the better choice in real
time; on LCBench's minutes-long trials it is a rounding error and the choice pays (bench/RESULTS.md). So the
default, `candidates: auto`, decides by what it measures: 8 candidates while one choice's CPU time is at most
AUTO_SHARE of the median completed trial's training time, the inner sampler's own proposal otherwise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.core import optuna_compat as compat
from autotune.search import space
from autotune.search.credit import EPOCHS, Delegating
from autotune.search.pareto import hypervolume
from autotune.spec import ParamSpec, RunConfig, TrialRecord

MIN_TRIALS = 8  # finished trials with a curve before predictions choose: as TPE's random start-up
CANDIDATE_SAMPLERS = ("tpe", "random")  # samplers that propose a parameter at a time: candidates are drawn from them
AUTO_K = 8  # `candidates: auto`: candidates per trial where choosing among them is worth its cost
AUTO_SHARE = 0.02  # ... that is, where one choice costs at most this share of a trial's training time
TREES = 32
EPOCHS_KEPT = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # the epochs of a curve that train the forest (and its last)


class Features:
    """Parameters -> a numeric row: floats and ints scaled to [0, 1] (log where searched so), categoricals one-hot,
    a parameter a trial does not have (its `when` did not hold) -1 / all zeros."""

    def __init__(self, dists: dict[str, BaseDistribution]) -> None:
        self.dists = dists

    def row(self, params: dict[str, Any]) -> list[float]:
        out: list[float] = []
        for name, d in self.dists.items():
            v = params.get(name)
            if isinstance(d, CategoricalDistribution):
                out.extend(1.0 if v is not None and v == c else 0.0 for c in d.choices)
                continue
            if v is None:
                out.append(-1.0)
                continue
            lo, hi, x = float(d.low), float(d.high), float(v)  # type: ignore[attr-defined]
            if d.log:  # type: ignore[attr-defined]
                lo, hi, x = math.log(lo), math.log(hi), math.log(max(x, 1e-300))
            out.append((x - lo) / (hi - lo) if hi > lo else 0.0)
        return out


class Snapshot(compat.StudyView):
    """The study with its trials read once: a choice asks the inner sampler K x parameters times, and each ask reads
    the trials (on SQLite or PostgreSQL, a round trip each); within one choice they do not change."""

    def __init__(self, study: optuna.Study) -> None:
        super().__init__(study)
        self._trials = study.get_trials(deepcopy=False)

    def shown_trials(self, deepcopy: bool, states: Any, use_cache: bool) -> list[FrozenTrial]:
        return [t for t in self._trials if states is None or t.state in states]

    @property
    def trials(self) -> list[FrozenTrial]:
        return list(self._trials)


class PredictedFront(Delegating):
    """`inner`, asked for `k` candidates per trial; the one whose predicted objectives add most to the front runs.

    `cfg` gives the space (every parameter, conditional ones included, is sampled relatively, so a candidate is a
    whole point) and the objectives' directions and which of them is a time (predicted on a log scale)."""

    def __init__(self, inner: optuna.samplers.BaseSampler, cfg: RunConfig, k: int,
                 seed: int | None = None, auto: bool = False) -> None:
        self.inner = inner
        self.k = k
        # auto: choose only while one choice (its measured CPU seconds) costs at most AUTO_SHARE of the median
        # trial's training time; the first eligible trial measures it (a choice's cost only grows with trials)
        self.auto = auto
        self.choice_s: float | None = None
        self.cfg = cfg
        self._dists = {name: space.distribution(cfg.space[name]) for name in space.order(cfg.space)}
        self._features = Features(self._dists)
        self._signs = [1.0 if d == "minimize" else -1.0 for d in cfg.directions]  # to minimized
        self._log = [o.metric.endswith("_s") or o.metric.endswith("time") for o in cfg.objectives]
        self._seed = seed
        # epochs fixed (not searched): every epoch of every trial, the stopped ones' too, is a point (settings, share
        # of the run done) -> values, and a candidate is predicted at the run's end (share 1): the curves of trials
        # stopped early still teach which settings learn fast, as on LCBench's 52-epoch cosine runs
        fixed = cfg.fixed().get(EPOCHS) if EPOCHS not in self._dists else None
        self._fixed_epochs = int(fixed) if fixed else None

    # ---- Optuna's sampler interface

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return dict(self._dists) if self.k > 1 and len(study.directions) > 1 else {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return {}
        t0 = time.thread_time()
        study = Snapshot(study)  # type: ignore[assignment]  # K x parameters proposals: one storage read
        data = self._data(study)
        if data is None or (self.auto and not self.worth_it(study)):
            return {}
        cands = [self._candidate(study, trial) for _ in range(self.k)]
        chosen = cands[self._choose(data, cands)]
        self.choice_s = time.thread_time() - t0
        return chosen

    def worth_it(self, study: optuna.Study) -> bool:
        """`candidates: auto`: whether the last choice's CPU seconds are at most AUTO_SHARE of the median completed
        trial's training time (`train_time_s`; else its duration); unmeasured yet: yes, once, to measure it."""
        if self.choice_s is None:
            return True
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        secs = []
        for t in done:
            measured = TrialRecord.of(t).metric("train_time_s")
            if measured is not None:
                secs.append(measured)
            elif t.datetime_complete and t.datetime_start:
                secs.append((t.datetime_complete - t.datetime_start).total_seconds())
        return bool(secs) and self.choice_s <= AUTO_SHARE * float(np.median(secs))

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    # ---- candidates and their predictions

    def _candidate(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, Any]:
        """One whole point from the inner sampler: the parameters `space.sample` would suggest (conditional ones
        only where their `when` holds), as Optuna stores them."""
        params: dict[str, Any] = {}

        def pick(name: str, spec: ParamSpec) -> Any:
            params[name] = self.inner.sample_independent(study, trial, name, self._dists[name])
            return space.decode(spec, params[name])

        space.walk(self.cfg, pick)
        return params

    def _data(self, study: optuna.Study) -> tuple[np.ndarray, np.ndarray, list[list[float]]] | None:
        """(feature rows, minimized targets, the completed trials' minimized values) from every trial's curve, or
        None while fewer than MIN_TRIALS finished trials have one."""
        rows: list[list[float]] = []
        ys: list[list[float]] = []
        front: list[list[float]] = []
        n = 0
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            curve = TrialRecord.of(t).epoch_values or []
            if t.state == TrialState.COMPLETE and t.values is not None:
                front.append(self._to_min(t.values))
            if not curve:
                continue
            n += 1
            # epochs searched: each epoch of a curve is a point (settings, epochs) -> values; epochs fixed: (settings,
            # share of the run) -> values; else only a completed trial's last values are what its settings give
            if EPOCHS in self._dists or self._fixed_epochs:
                keep = {e for e in EPOCHS_KEPT if e <= len(curve)} | {len(curve)}
            elif t.state == TrialState.COMPLETE:
                keep = {len(curve)}
            else:
                continue
            for e in sorted(keep):
                vals = curve[e - 1]
                if len(vals) != len(self._signs) or not all(map(math.isfinite, vals)):
                    continue
                rows.append(self._row({**t.params, EPOCHS: e}, e))
                ys.append(self._to_min(vals))
        if n < MIN_TRIALS or not front:
            return None
        return np.array(rows), np.array(ys), front

    def _row(self, params: dict[str, Any], epoch: int | None = None) -> list[float]:
        """A point's features; with epochs fixed, the share of the run done after `epoch` (a candidate: its end)."""
        row = self._features.row(params)
        if self._fixed_epochs:
            row.append((epoch if epoch is not None else self._fixed_epochs) / self._fixed_epochs)
        return row

    def _to_min(self, values: Sequence[float]) -> list[float]:
        return [s * (math.log(max(v, 1e-9)) if lg else v) for s, lg, v in zip(self._signs, self._log, values)]

    def _choose(self, data: tuple[np.ndarray, np.ndarray, list[list[float]]],
                cands: list[dict[str, Any]]) -> int:
        from sklearn.ensemble import RandomForestRegressor

        x, y, front = data
        forest = RandomForestRegressor(n_estimators=TREES, min_samples_leaf=2, random_state=self._seed or 0)
        forest.fit(x, y)
        xc = np.array([self._row(c) for c in cands])
        per_tree = np.stack([tree.predict(xc) for tree in forest.estimators_])  # trees x candidates x objectives
        optimistic = per_tree.mean(axis=0) - per_tree.std(axis=0)
        pts = np.array(front + [list(p) for p in optimistic])
        ref = (pts.max(axis=0) + 0.1 * (pts.max(axis=0) - pts.min(axis=0)) + 1e-9).tolist()
        base = hypervolume(front, ref)
        gains = [hypervolume(front + [list(p)], ref) - base for p in optimistic]
        best = int(np.argmax(gains))
        return best if gains[best] > 0 else 0


def applies(cfg: RunConfig) -> bool:
    """Whether candidates can be chosen here: several objectives, a sampler proposing a parameter at a time, the joint
    strategy (config/checks.py refuses a number above 1 elsewhere; `auto` is then 1)."""
    return cfg.multi_objective and cfg.study.sampler in CANDIDATE_SAMPLERS and cfg.study.strategy == "joint"


def n_candidates(cfg: RunConfig) -> int:
    """`study.candidates`: a number as is; `auto`, AUTO_K where candidates apply (chosen only while worth their
    cost: `PredictedFront.worth_it`), else 1."""
    k = cfg.study.candidates
    if k == "auto":
        return AUTO_K if applies(cfg) else 1
    return int(k)


def wrap(inner: optuna.samplers.BaseSampler, cfg: RunConfig, seed: int | None) -> optuna.samplers.BaseSampler:
    """`inner` choosing among `n_candidates(cfg)` proposals per trial (as is where that is 1)."""
    k = n_candidates(cfg)
    if k <= 1 or not cfg.multi_objective:
        return inner
    return PredictedFront(inner, cfg, k, seed, auto=cfg.study.candidates == "auto")


__all__ = ["AUTO_K", "AUTO_SHARE", "CANDIDATE_SAMPLERS", "Features", "PredictedFront", "applies", "hypervolume",
           "n_candidates", "wrap"]

