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
time, so the default is 1 (bench/RESULTS.md, "A sampler given each candidate's predicted objectives").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.search import space
from autotune.search.credit import EPOCHS, Delegating
from autotune.search.pruners import hypervolume_2d
from autotune.spec import ParamSpec, RunConfig, TrialRecord

MIN_TRIALS = 8  # finished trials with a curve before predictions choose: as TPE's random start-up
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


def hypervolume(points: Sequence[Sequence[float]], ref: Sequence[float]) -> float:
    if not points:
        return 0.0
    if len(ref) == 2:
        return hypervolume_2d(points, (ref[0], ref[1]))
    from optuna._hypervolume import compute_hypervolume

    inside = np.array([p for p in points if all(a < b for a, b in zip(p, ref))], dtype=float)
    return float(compute_hypervolume(inside, np.array(ref, dtype=float))) if len(inside) else 0.0


class PredictedFront(Delegating):
    """`inner`, asked for `k` candidates per trial; the one whose predicted objectives add most to the front runs.

    `cfg` gives the space (every parameter, conditional ones included, is sampled relatively, so a candidate is a
    whole point) and the objectives' directions and which of them is a time (predicted on a log scale)."""

    def __init__(self, inner: optuna.samplers.BaseSampler, cfg: RunConfig, k: int,
                 seed: int | None = None) -> None:
        self.inner = inner
        self.k = k
        self.cfg = cfg
        self._dists = {name: space.distribution(cfg.space[name]) for name in space.order(cfg.space)}
        self._features = Features(self._dists)
        self._signs = [1.0 if d == "minimize" else -1.0 for d in cfg.directions]  # to minimized
        self._log = [o.metric.endswith("_s") or o.metric.endswith("time") for o in cfg.objectives]
        self._seed = seed

    # ---- Optuna's sampler interface

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return dict(self._dists) if self.k > 1 and len(study.directions) > 1 else {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return {}
        data = self._data(study)
        if data is None:
            return {}
        cands = [self._candidate(study, trial) for _ in range(self.k)]
        return cands[self._choose(data, cands)]

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
            # epochs searched: each epoch of a curve is a point (settings, epochs) -> values; else only a completed
            # trial's last values are what its settings give
            if EPOCHS in self._dists:
                keep = {e for e in EPOCHS_KEPT if e <= len(curve)} | {len(curve)}
            elif t.state == TrialState.COMPLETE:
                keep = {len(curve)}
            else:
                continue
            for e in sorted(keep):
                vals = curve[e - 1]
                if len(vals) != len(self._signs) or not all(map(math.isfinite, vals)):
                    continue
                rows.append(self._features.row({**t.params, EPOCHS: e}))
                ys.append(self._to_min(vals))
        if n < MIN_TRIALS or not front:
            return None
        return np.array(rows), np.array(ys), front

    def _to_min(self, values: Sequence[float]) -> list[float]:
        return [s * (math.log(max(v, 1e-9)) if lg else v) for s, lg, v in zip(self._signs, self._log, values)]

    def _choose(self, data: tuple[np.ndarray, np.ndarray, list[list[float]]],
                cands: list[dict[str, Any]]) -> int:
        from sklearn.ensemble import RandomForestRegressor

        x, y, front = data
        forest = RandomForestRegressor(n_estimators=TREES, min_samples_leaf=2, random_state=self._seed or 0)
        forest.fit(x, y)
        xc = np.array([self._features.row(c) for c in cands])
        per_tree = np.stack([tree.predict(xc) for tree in forest.estimators_])  # trees x candidates x objectives
        optimistic = per_tree.mean(axis=0) - per_tree.std(axis=0)
        pts = np.array(front + [list(p) for p in optimistic])
        ref = (pts.max(axis=0) + 0.1 * (pts.max(axis=0) - pts.min(axis=0)) + 1e-9).tolist()
        base = hypervolume(front, ref)
        gains = [hypervolume(front + [list(p)], ref) - base for p in optimistic]
        best = int(np.argmax(gains))
        return best if gains[best] > 0 else 0


def n_candidates(cfg: RunConfig) -> int:
    """`study.candidates` (config/checks.py refuses more than 1 where it cannot apply)."""
    return cfg.study.candidates


def wrap(inner: optuna.samplers.BaseSampler, cfg: RunConfig, seed: int | None) -> optuna.samplers.BaseSampler:
    """`inner` choosing among `n_candidates(cfg)` proposals per trial (as is where that is 1)."""
    k = n_candidates(cfg)
    return PredictedFront(inner, cfg, k, seed) if k > 1 and cfg.multi_objective else inner


__all__ = ["Features", "PredictedFront", "hypervolume", "n_candidates", "wrap"]

