"""A sampler that chooses each trial by its predicted objectives: `study.candidates`.

A trial's training time is nearly a function of its settings (the model's size, the batch, the precision, the
epochs), and the study has already measured it for every trial that ran an epoch, the stopped ones included; its
accuracy after k epochs is in every trial's recorded curve. Optuna's samplers for several objectives use none of
that before a trial runs: MO-TPE proposes one point from the trials' parameters and ranks alone, and its proposals
stay near the trials it has seen, so the front's extremes (the smallest, fastest models; the slow, accurate ones)
are found late or never.

`PredictedFront` draws a pool of K whole candidates per trial: the inner sampler's own proposal (TPE, shown stopped
trials as the shorter trials they equal: search/credit.py), points near the members of the front so far (each
parameter moved by a small step in its own scale) and points drawn uniformly over the space. It predicts each one's
objectives from every epoch of every trial recorded so far (`Model`: a random forest, settings and epochs in, values
out, the spread of its trees its uncertainty; a clock that adds up per epoch, such as the training time, also by a
log-linear fit in the settings, which extrapolates to the corners of the space that a forest cannot reach), and runs
the candidate whose optimistic point (mean less one spread; a cost, such as the time, at its mean) adds most to the
hypervolume of the front so far.
Every EXPLORE_EVERY-th trial runs the inner sampler's proposal as is, so its exploration never stops; every
ACCURATE_EVERY-th of the others runs the candidate best at its optimistic point in the measures of quality (accuracy,
a loss), whatever its cost: a slow, accurate point adds a thin slice of hypervolume, so the gain alone finds the
front's accurate end late.

Cost-aware from the first trial (search/cost.py): a candidate's gain is divided by its predicted training time^alpha
(cost cooling: alpha falls from 1 as trials finish and a known budget is spent), and before MIN_TRIALS trials have a
curve each trial is the cheapest by predicted time of START_POOL uniform draws (a log-linear fit of the clock on the
settings, from the second trial on), not a full-cost random one. Trials still running (other workers) are in the
front the gains are measured against, at their optimistic points, so two workers do not run the same candidate.

Its price is the sampler's own time (a forest refit and a few hundred predictions per trial: tens of milliseconds
on a 2-core CPU after a hundred trials): on sub-second trials that outweighs the better choice in real time; on
trials of minutes it is a rounding error (bench/RESULTS.md). So the default, `candidates: auto`, decides by what it
measures (cost.Meter): its CPU time is kept within CAP_SHARE of the trials' time, each trial proposed by the costliest
mode whose last measured price fits in what is left (the candidates, the inner sampler's own proposal, random).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.core import optuna_compat as compat
from autotune.search import cost, space
from autotune.search.credit import EPOCHS, Delegating
from autotune.search.pareto import hypervolume, nondominated_ranks
from autotune.search.pruners import CUMULATIVE
from autotune.search.sampler_kinds import SAMPLERS
from autotune.spec import ParamSpec, RunConfig, TrialRecord, is_quality

# trials with a curve before predictions choose: as TPE's random start-up. 4 was tried (bench/RESULTS.md,
# "Predictions from the fourth trial"): a lean at 1 worker on dev (its interval includes 1), level at 8; not kept
MIN_TRIALS = 8
AUTO_K = 256  # `candidates: auto`: candidates per trial where choosing among them is worth its cost
AUTO_SHARE = cost.CAP_SHARE  # ... that is, while the strategy's CPU time is at most this share of the trials' time
# Cost-aware proposals are built and off by default: on LCBench's development tasks (8 x 2 seeds, bench/strategy_dev.py)
# gain per second^alpha with cheap start-up trials matched plain Optuna's end 1.14x sooner than the old default but
# ended less accurate (best accuracy -0.012 in the median, 5 of 8 tasks more than 0.002 below plain Optuna's); off,
# 1.03x and +0.000 (2 of 8). START_POOL 8 and COST_WEIGHT 1 turn them on.
START_POOL = 1  # start-up trials: the cheapest by predicted time of this many uniform draws (1: the inner sampler's)
COST_WEIGHT = 0.0  # the cost exponent's scale (cost.alpha x this; 0: gain alone)
EXPLORE_EVERY = 2  # every this many trials, the inner sampler's own proposal runs as is
RANDOM_EVERY = 0  # ... and every this many of those exploring trials, uniform random values instead (0: never)
LOCAL_SHARE = 0.5  # of the candidates not from the inner sampler: near the front's members (the rest: uniform)
LOCAL_STEP = 0.1  # a local candidate's move per parameter: this share of its range (its own scale: log where log)
LOCAL_SWITCH = 0.2  # ... a categorical parameter takes another choice with this probability
# every this many choosing trials, the candidate most accurate at its optimistic point (0: never): the accurate end
# kept in the proposals, as the rungs keep it in the promotions. On dev (bench/RESULTS.md, "The accurate end in the
# proposals"): 1 worker, seeds 0-5, time to match level (0.99x [0.82, 1.19]) and no task below plain Optuna's best
# accuracy (off: 1 of 8); 8 workers, seeds 0-2, 0.87x [0.61, 1.16] and none below either way. 2: 0.92x at 1 worker
ACCURATE_EVERY = 4
# ... counted over all trials, not the choosing ones: an accurate choice is owed every EXPLORE_EVERY x ACCURATE_EVERY
# trials and made at the next choice the strategy's cap allows (where the cap leaves few choices, on sub-second
# trials, every fourth of them is too few to keep the accurate end). Built, off by default: on the MNIST-1D replay
# (bench/RESULTS.md, "A floor under the clock's optimism") two runs of the same seeds gave 0.87x and 1.30x against
# the default, best accuracy +0.0008 and -0.0046: the runs' own spread, no choice
ACCURATE_OWED = False
OPTIMISM = 1.0  # the optimistic point: the prediction less this many spreads (each objective minimized)
# ... and for a cost (an objective that is not a measure of quality: the training time, a size): its spread x this
# (0: its optimistic point is its prediction). A trial's time is nearly a function of its settings and is measured,
# so optimism on it is hope of nothing: it made near-copies of the front's fastest member look faster than it
# forever. On dev (bench/RESULTS.md, "A clock at its prediction") 0 was level at 1 worker (1.01x [0.79, 1.32], seeds
# 0-5) and ahead at 8 (1.38x [0.99, 2.13]; strict 1.30x [1.01, 1.82], seeds 0-2)
COST_OPTIMISM = 0.0
# built, off by default: a candidate's optimism on a cost, x 1/sqrt(1 + the trials run or running near it) (a count
# bonus), so an unexplored region keeps its hope on the time and a crowded corner loses it. "Near": a Gaussian kernel
# over the features' RMS distance with this scale (0: off). On dev (bench/RESULTS.md, "A cost's optimism by the
# trials near it") 0.1 was level with the default at 1 worker (0.99x [0.85, 1.15], seeds 0-9), at 8 (0.93x [0.64,
# 1.30], seeds 0-2) and on the MNIST-1D replay, and no better than the optimistic clock it was to replace
NEAR_SCALE = 0.0
NEAR_COST_OPTIMISM = 1.0  # ... the cost's optimism of a candidate no trial is near, where NEAR_SCALE is on
NEAR_QUALITY = False  # ... and the count shrinks the optimism on quality too
# built, off by default: with COST_OPTIMISM on, a cost's optimistic point no better than the completed front's best
# in that cost (or the candidate's prediction, where that is better): optimism on a cost may send a trial into the
# front's middle, never past its fastest member, where near-copies of it looked faster than it forever (the lock-in
# COST_OPTIMISM 0 ended). On dev (bench/RESULTS.md, "A floor under the clock's optimism") COST_OPTIMISM 1 with it was
# level at 1 worker (1.02x [0.88, 1.18], seeds 0-9) and behind at 8 (0.89x [0.74, 1.07], seeds 0-2)
COST_FLOOR = False
TREES = 32
# the model is refit every trial up to REFIT_ALL trials with a curve, then once they have grown by REFIT_GROWTH since
# its last fit: refit every trial, thousands of one-minute trials cost O(n^2) CPU (bench/RESULTS.md, "The report's
# cost"); growth from the start was level on dev at 1 worker but leaned worse at 8 (0.86x [0.65, 1.08]), so the
# runs dev has (a median 70 trials at 1 worker, 211 at 8) keep a refit per trial (250, level on dev at 8 workers, was
# reverted with the meter's single read: bench/RESULTS.md, "Where a real run's clock goes")
REFIT_ALL = 500
REFIT_GROWTH = 0.05
EPOCHS_KEPT = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # the epochs of a curve that train the model (and its last)


class Features:
    """Parameters <-> a numeric row: floats and ints scaled to [0, 1] (log where searched so), categoricals one-hot,
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
            out.append(-1.0 if v is None else unit(d, v))
        return out


def _bounds(d: FloatDistribution | IntDistribution) -> tuple[float, float]:
    lo, hi = float(d.low), float(d.high)
    return (math.log(lo), math.log(hi)) if d.log else (lo, hi)


def unit(d: BaseDistribution, value: Any) -> float:
    """A number's place in its range, 0 to 1 (on the log scale where the parameter is searched so)."""
    lo, hi = _bounds(d)  # type: ignore[arg-type]
    x = math.log(max(float(value), 1e-300)) if d.log else float(value)  # type: ignore[attr-defined]
    return (x - lo) / (hi - lo) if hi > lo else 0.0


def from_unit(d: FloatDistribution | IntDistribution, u: float) -> float | int:
    """The value at place `u` (0 to 1) of a number's range, on its grid (an int, a step)."""
    lo, hi = _bounds(d)
    x = lo + min(1.0, max(0.0, u)) * (hi - lo)
    v = math.exp(x) if d.log else x
    step = d.step
    if step is not None:
        v = float(d.low) + round((v - float(d.low)) / step) * step
    v = min(float(d.high), max(float(d.low), v))
    return int(round(v)) if isinstance(d, IntDistribution) else float(v)


def draw(d: BaseDistribution, rng: np.random.Generator, near: Any = None) -> Any:
    """A value of `d`: uniform over its range (its own scale), or, given `near`, a small step from it."""
    if isinstance(d, CategoricalDistribution):
        if near is not None and near in d.choices and rng.random() >= LOCAL_SWITCH:
            return near
        return d.choices[int(rng.integers(len(d.choices)))]
    assert isinstance(d, (FloatDistribution, IntDistribution))
    if near is None:
        if isinstance(d, IntDistribution) and not d.log:  # every integer equally likely, the ends included
            return int(d.low + d.step * rng.integers((d.high - d.low) // d.step + 1))
        return from_unit(d, float(rng.random()))
    return from_unit(d, unit(d, near) + float(rng.normal(0.0, LOCAL_STEP)))


class Model:
    """Each objective (minimized; a time on a log scale) predicted from a feature row: a random forest over every
    objective, whose trees' spread is the uncertainty; a clock that adds up per epoch (`clocks`) first by a
    least-squares fit, linear in the row (whose last column is the log of the epochs done), the forest on what it
    leaves, so a clock is extrapolated to corners of the space no trial has reached."""

    def __init__(self, x: np.ndarray, y: np.ndarray, clocks: Sequence[bool], seed: int) -> None:
        from sklearn.ensemble import RandomForestRegressor

        self.clocks = np.array(clocks, dtype=bool)
        self.coef = np.zeros((x.shape[1] + 1, y.shape[1]))
        if self.clocks.any():
            a = np.column_stack([x, np.ones(len(x))])
            reg = 1e-3 * np.eye(a.shape[1])
            reg[-1, -1] = 0.0
            self.coef[:, self.clocks] = np.linalg.solve(a.T @ a + reg, a.T @ y[:, self.clocks])
        self.forest = RandomForestRegressor(n_estimators=TREES, min_samples_leaf=2, max_features=0.6,
                                            random_state=seed).fit(x, y - self._linear(x))

    def _linear(self, x: np.ndarray) -> np.ndarray:
        return np.column_stack([x, np.ones(len(x))]) @ self.coef

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, spread) per row and objective."""
        per_tree = np.stack([tree.predict(x).reshape(len(x), -1) for tree in self.forest.estimators_])
        return per_tree.mean(axis=0) + self._linear(x), per_tree.std(axis=0)


def near_share(rows: np.ndarray, seen: np.ndarray | None, scale: float) -> np.ndarray:
    """Per row, 1/sqrt(1 + n), n the trials near it: each seen row counts exp(-d^2 / 2 scale^2), d the RMS over the
    features of the difference (a count bonus, as in UCB's; the forest's spread does not shrink where trials crowd)."""
    if seen is None or not len(seen):
        return np.ones(len(rows))
    d2 = np.maximum((rows ** 2).sum(axis=1)[:, None] + (seen ** 2).sum(axis=1)[None, :] - 2.0 * rows @ seen.T, 0.0)
    d2 /= rows.shape[1]
    n = np.exp(-d2 / (2.0 * scale * scale)).sum(axis=1)
    return np.asarray(1.0 / np.sqrt(1.0 + n), dtype=float)


def gains(front: list[list[float]], points: np.ndarray) -> np.ndarray:
    """How much each point would add to the hypervolume of `front` (minimized), against a reference just beyond
    both."""
    pts = np.array(front + points.tolist())
    ref = (pts.max(axis=0) + 0.1 * (pts.max(axis=0) - pts.min(axis=0)) + 1e-9).tolist()
    base = hypervolume(front, ref)
    out = np.array([hypervolume(front + [list(p)], ref) - base for p in points])
    return np.where(out > 1e-9 * max(base, 1e-12), out, 0.0)  # a rounding error adds nothing


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


@dataclass(frozen=True)
class Data:
    """What a choice learns from: every kept epoch of every trial with a curve (feature rows, minimized values), the
    completed trials' front (minimized values, parameters), and how many trials had a curve."""

    x: np.ndarray
    y: np.ndarray
    front: list[list[float]]
    parents: list[dict[str, Any]]
    trials: int
    pending: tuple[dict[str, Any], ...] = ()  # the parameters of trials still running (other workers')
    finished: int = 0  # trials complete or stopped
    budget_used: float | None = None  # the share of a known budget spent (cost cooling)
    seen: np.ndarray | None = None  # the feature rows of the trials run or running (the count bonus)

    @property
    def ready(self) -> bool:
        """Enough trials with a curve for predictions to choose (before: cheap start-up trials)."""
        return self.trials >= MIN_TRIALS and bool(self.front)


class PredictedFront(Delegating):
    """`inner` and a pool of `k` candidates per trial; the one whose predicted objectives add most to the front runs.

    `cfg` gives the space (every parameter, conditional ones included, is sampled relatively, so a candidate is a
    whole point) and the objectives' directions and which of them is a clock (predicted on a log scale)."""

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
        self._clocks = [o.metric in CUMULATIVE for o in cfg.objectives]
        self._quality = [is_quality(o.metric) for o in cfg.objectives]  # accuracy, a loss, a user's metric
        self._seed = seed or 0
        # epochs fixed (not searched): every epoch of every trial, the stopped ones' too, is a point (settings, share
        # of the run done) -> values, and a candidate is predicted at the run's end (share 1): the curves of trials
        # stopped early still teach which settings learn fast, as on LCBench's 52-epoch cosine runs
        fixed = cfg.fixed().get(EPOCHS) if EPOCHS not in self._dists else None
        self._fixed_epochs = int(fixed) if fixed else None
        self._snapshots: dict[int, Snapshot] = {}  # trial number -> the study as its sampling read it
        self._model: tuple[int, Model] | None = None  # (trials with a curve it was fit on, the model)
        self.meter = cost.Meter(AUTO_SHARE)  # auto: the strategy's CPU seconds against its trials' seconds
        # the cheapest mode's proposals: a stream of its own (the inner sampler's seed would draw its points again:
        # a random or TPE inner sampler seeded alike proposed trial 1 what this proposed trial 0)
        self._random = optuna.samplers.RandomSampler(seed=None if seed is None else seed + 1)
        self._modes: dict[int, str] = {}  # trial number -> the mode that proposes it
        self._spent: dict[int, float] = {}  # trial number -> CPU seconds its proposal took so far
        self._ready = False  # predictions have chosen before (an exploring trial then needs no study read)
        self._awaiting: set[int] = set()  # trials proposed here whose time the meter has not counted yet
        self._finished_rows: dict[int, tuple[bool, list[list[float]], list[list[float]]]] = {}  # trial id -> rows
        self._accurate_made = 0  # accurate choices made (ACCURATE_OWED)

    # ---- Optuna's sampler interface

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return dict(self._dists) if self.k > 1 and len(study.directions) > 1 else {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return {}
        t0 = time.thread_time()
        if self.auto:  # (the study read this may take is the strategy's cost too)
            self._count_trials(study)
            self._awaiting.add(trial.number)
        mode = self.meter.mode() if self.auto else "choose"
        self._modes[trial.number] = mode
        try:
            if mode != "choose" or (self._ready and trial.number % EXPLORE_EVERY == EXPLORE_EVERY - 1):
                self._modes[trial.number] = mode if mode != "choose" else self._exploring(trial)
                return {}  # the inner sampler's own proposal, parameter by parameter (or random ones)
            study = self._snapshot(study, trial)  # type: ignore[assignment]  # the inner sampler, the model: one read
            data = self._data(study, trial)
            if data is None:
                self._modes[trial.number] = "inner"
                return {}
            if not data.ready:
                self._modes[trial.number] = "inner"  # (priced as the inner sampler's: a few predictions)
                return self._cheap_start(trial, data)
            if trial.number % EXPLORE_EVERY == EXPLORE_EVERY - 1:
                self._ready = True
                self._modes[trial.number] = self._exploring(trial)
                return {}
            self._ready = True
            cands = self._pool(study, trial, data.parents)
            chosen = cands[self._choose(data, cands, self._accurate(trial))]
            self.choice_s = time.thread_time() - t0
            return chosen
        finally:
            self._spent[trial.number] = self._spent.get(trial.number, 0.0) + time.thread_time() - t0

    @staticmethod
    def _every(trial: FrozenTrial, n: int) -> bool:
        """Whether `trial` falls in every n-th round of EXPLORE_EVERY trials (an exploring trial among the exploring
        ones, a choosing one among the choosing ones); never where n is 0."""
        return n > 0 and (trial.number // EXPLORE_EVERY) % n == n - 1

    def _accurate(self, trial: FrozenTrial) -> bool:
        """Whether a choosing trial is chosen for the accurate end alone (every ACCURATE_EVERY-th one; with
        ACCURATE_OWED, wherever fewer have been made than one per EXPLORE_EVERY x ACCURATE_EVERY trials so far)."""
        if not ACCURATE_OWED:
            return self._every(trial, ACCURATE_EVERY)
        if ACCURATE_EVERY <= 0 or self._accurate_made >= (trial.number + 1) // (EXPLORE_EVERY * ACCURATE_EVERY):
            return False
        self._accurate_made += 1
        return True

    def _exploring(self, trial: FrozenTrial) -> str:
        """An exploring trial's mode: the inner sampler's proposal, or every RANDOM_EVERY-th one uniform values."""
        return "random" if self._every(trial, RANDOM_EVERY) else "inner"

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        """The trial's proposal priced (its mode's CPU seconds). Its time is read later (`_count_trials`): a trial's
        records may be written after Optuna calls this."""
        super().after_trial(study, trial, state, values)
        mode = self._modes.pop(trial.number, None)
        spent = self._spent.pop(trial.number, 0.0)
        if mode is not None:
            self.meter.charge(mode, spent)
        measured = self._time_of(trial, final=False)
        if measured is not None and trial.number in self._awaiting:
            self._awaiting.discard(trial.number)
            self.meter.trial_done(measured)

    def _time_of(self, t: FrozenTrial, final: bool = True) -> float | None:
        """A finished trial's time: its `train_time_s`, else its clock after its last epoch (a stopped trial), else
        (`final`) its duration."""
        rec = TrialRecord.of(t)
        measured = rec.metric("train_time_s")
        curve = rec.epoch_values or []
        clock = [i for i, c in enumerate(self._clocks) if c]
        if measured is None and clock and curve and len(curve[-1]) == len(self._signs):
            measured = float(curve[-1][clock[0]])
        if measured is None and final and t.datetime_start is not None and t.datetime_complete is not None:
            measured = (t.datetime_complete - t.datetime_start).total_seconds()
        return measured if measured is None else float(measured)

    def _count_trials(self, study: optuna.Study) -> None:
        """The finished trials this sampler proposed whose time `after_trial` could not read yet, added to what the
        strategy may spend."""
        if not self._awaiting:
            return
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)):
            if t.number in self._awaiting:
                self._awaiting.discard(t.number)
                self.meter.trial_done(self._time_of(t) or 0.0)

    def worth_it(self, study: optuna.Study) -> bool:
        """`candidates: auto`: whether the candidates' choice fits in what the strategy may still spend."""
        return self.meter.mode() == "choose"

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        t0 = time.thread_time()
        try:
            if self._modes.get(trial.number) == "random":
                return self._random.sample_independent(study, trial, param_name, param_distribution)
            return self.inner.sample_independent(self._snapshot(study, trial), trial, param_name, param_distribution)
        finally:
            self._spent[trial.number] = self._spent.get(trial.number, 0.0) + time.thread_time() - t0

    def _budget_used(self, study: optuna.Study) -> float | None:
        """The share of a known budget spent: finished trials of `n_trials`, or the run's time of `timeout`."""
        n, timeout = self.cfg.study.n_trials, self.cfg.study.timeout
        trials = study.get_trials(deepcopy=False)
        used = []
        if n is not None and n < cost.BIG_BUDGET:
            used.append(sum(t.state.is_finished() for t in trials) / n)
        starts = [t.datetime_start for t in trials if t.datetime_start is not None]
        if timeout and starts:
            import datetime

            used.append((datetime.datetime.now() - min(starts)).total_seconds() / timeout)
        return max(used) if used else None

    def _cheap_start(self, trial: FrozenTrial, data: Data) -> dict[str, Any]:
        """A start-up trial: the cheapest by predicted training time of START_POOL uniform draws; the inner sampler's
        proposal while no clock is known. The clock adds up per epoch, so its log is log(epochs) + the log of one
        epoch's time, and only the second is fit (ridge least squares on the settings, one row per trial)."""
        clock = [i for i, (c, lg) in enumerate(zip(self._clocks, self._log)) if c and lg]
        if not clock or len(data.x) < 2 or START_POOL <= 1:
            return {}
        per_epoch: dict[tuple[float, ...], float] = {}  # a trial's settings -> the log of one epoch's time
        for row, y in zip(data.x, data.y[:, clock[0]]):
            per_epoch[tuple(row[:-1])] = float(y) - float(row[-1])
        x = np.array(list(per_epoch))
        a = np.column_stack([x, np.ones(len(x))])
        reg = 0.3 * np.eye(a.shape[1])  # a few trials, many columns: ridge on the settings, none on the offset
        reg[-1, -1] = 0.0
        coef = np.linalg.solve(a.T @ a + reg, a.T @ np.array(list(per_epoch.values())))
        rng = np.random.default_rng([self._seed, trial.number, 1])
        cands = [self._candidate(lambda name: draw(self._dists[name], rng)) for _ in range(START_POOL)]
        rows = np.array([self._row(c) for c in cands])
        predicted = np.column_stack([rows[:, :-1], np.ones(len(rows))]) @ coef + rows[:, -1]
        return cands[int(np.argmin(predicted))]

    def _snapshot(self, study: optuna.Study, trial: FrozenTrial) -> Snapshot:
        """The study's trials, read once per trial: the inner sampler reads them for every parameter (on SQLite or
        PostgreSQL a round trip each), and a trial's parameters are better drawn from one view of the study."""
        snap = self._snapshots.get(trial.number)
        if snap is None or snap.study is not study:
            self._snapshots = {trial.number: Snapshot(study)}
            snap = self._snapshots[trial.number]
        return snap

    # ---- candidates and their predictions

    def _pool(self, study: optuna.Study, trial: FrozenTrial, parents: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The inner sampler's proposal, then points near the front's members (`parents`), then uniform ones."""
        rng = np.random.default_rng([self._seed, trial.number])
        out = [self._candidate(lambda name: self.inner.sample_independent(study, trial, name, self._dists[name]))]
        local = int(round(LOCAL_SHARE * (self.k - 1))) if parents else 0
        for i in range(self.k - 1):
            near = parents[int(rng.integers(len(parents)))] if i < local else {}
            out.append(self._candidate(lambda name, near=near: draw(self._dists[name], rng, near.get(name))))
        return out

    def _candidate(self, value: Any) -> dict[str, Any]:
        """One whole point, `value(name)` per parameter: the parameters `space.sample` would suggest (conditional
        ones only where their `when` holds), as Optuna stores them."""
        params: dict[str, Any] = {}

        def pick(name: str, spec: ParamSpec) -> Any:
            params[name] = value(name)
            return space.decode(spec, params[name])

        space.walk(self.cfg, pick)
        return params

    def _data(self, study: optuna.Study, trial: FrozenTrial | None = None) -> Data | None:
        """(feature rows, minimized targets, the completed trials' front, minimized, and their parameters) from every
        trial's curve, the running trials' parameters (but `trial`'s), or None while no trial has a curve (before
        MIN_TRIALS trials have one, the data is not `ready`: for cheap start-up trials only)."""
        rows: list[list[float]] = []
        ys: list[list[float]] = []
        done: list[tuple[list[float], dict[str, Any]]] = []
        n, finished = 0, 0
        pending = tuple(dict(t.params) for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                        if (trial is None or t.number != trial.number) and t.params)
        seen = [self._features.row(p) for p in pending] if NEAR_SCALE > 0 else []
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            finished += 1
            if NEAR_SCALE > 0 and t.params:
                seen.append(self._features.row(t.params))
            if t.state == TrialState.COMPLETE and t.values is not None:
                done.append((self._to_min(t.values), dict(t.params)))
            key = compat.trial_id(t)
            cached = self._finished_rows.get(key)
            if cached is None:  # a finished trial's curve never changes: its rows are made once
                cached = self._finished_rows[key] = self._rows_of(t)
            has_curve, t_rows, t_ys = cached
            n += has_curve
            rows += t_rows
            ys += t_ys
        if not rows:
            return None
        ranks = nondominated_ranks([v for v, _ in done], ["minimize"] * len(self._signs))
        front = [done[i] for i, r in enumerate(ranks) if r == 0]
        return Data(np.array(rows), np.array(ys), [v for v, _ in front], [p for _, p in front], n, pending, finished,
                    self._budget_used(study), np.array(seen) if seen else None)

    def _rows_of(self, t: FrozenTrial) -> tuple[bool, list[list[float]], list[list[float]]]:
        """A finished trial's part of the model's data: (whether it has a curve, its feature rows, their minimized
        values)."""
        curve = TrialRecord.of(t).epoch_values or []
        rows: list[list[float]] = []
        ys: list[list[float]] = []
        if not curve:
            return False, rows, ys
        # epochs searched: each epoch of a curve is a point (settings, epochs) -> values; epochs fixed: (settings,
        # share of the run) -> values; else only a completed trial's last values are what its settings give
        if EPOCHS in self._dists or self._fixed_epochs:
            keep = {e for e in EPOCHS_KEPT if e <= len(curve)} | {len(curve)}
        elif t.state == TrialState.COMPLETE:
            keep = {len(curve)}
        else:
            return True, rows, ys
        for e in sorted(keep):
            vals = curve[e - 1]
            if len(vals) != len(self._signs) or not all(map(math.isfinite, vals)):
                continue
            rows.append(self._row({**t.params, EPOCHS: e}, e))
            ys.append(self._to_min(vals))
        return True, rows, ys

    def _row(self, params: dict[str, Any], epoch: int | None = None) -> list[float]:
        """A point's features and, last, the log of the epochs done after `epoch` (a candidate: all of its run)."""
        row = self._features.row(params)
        epochs = epoch if epoch is not None else (self._fixed_epochs or int(params.get(EPOCHS) or 1))
        row.append(math.log(max(1, epochs)))
        return row

    def _to_min(self, values: Sequence[float]) -> list[float]:
        return [s * (math.log(max(v, 1e-9)) if lg else v) for s, lg, v in zip(self._signs, self._log, values)]

    def _choose(self, data: Data, cands: list[dict[str, Any]], accurate: bool = False) -> int:
        """The candidate whose optimistic point adds most to the front (the running trials' optimistic points in it)
        per predicted second^alpha (cost cooling); the first (the inner sampler's proposal) where none adds.
        `accurate`: the candidate whose optimistic point is best beyond the front in the measures of quality (their
        sum, each scaled by the front's range), where one is."""
        model = self._fit(data)
        rows = np.array([self._row(c) for c in cands])
        mean, spread = model.predict(rows)
        front = list(data.front)
        optimism = self._optimism()
        if data.pending:  # at their optimistic points: the hope a candidate near them holds is theirs to test
            p_rows = np.array([self._row(p) for p in data.pending])
            p_mean, p_spread = model.predict(p_rows)
            p_hope = p_mean - self._near_optimism(data, p_rows[:, :-1], optimism) * p_spread
            front += self._floored(data, p_mean, p_hope).tolist()
        hope = self._floored(data, mean, mean - self._near_optimism(data, rows[:, :-1], optimism) * spread)
        if accurate:
            best = self._most_accurate(front, hope)
            if best is not None:
                return best
        g = gains(front, hope)
        score = g
        clock = [i for i, (c, lg) in enumerate(zip(self._clocks, self._log)) if c and lg]
        if clock and COST_WEIGHT > 0:
            score = cost.per_cost(g, np.exp(mean[:, clock[0]]),
                                  COST_WEIGHT * cost.alpha(data.finished, data.budget_used))
        best = int(np.argmax(score))
        return best if g[best] > 0 else 0

    def _optimism(self) -> np.ndarray:
        """Per objective, how many spreads an optimistic point is beyond the prediction (a cost: COST_OPTIMISM's
        share)."""
        return np.array([OPTIMISM * (1.0 if q else COST_OPTIMISM) for q in self._quality])

    def _floored(self, data: Data, mean: np.ndarray, hope: np.ndarray) -> np.ndarray:
        """`hope` with each cost no better than the completed front's best in it or the prediction, the better of
        the two (COST_FLOOR; unchanged where it is off or no trial has completed)."""
        if not COST_FLOOR or not data.front:
            return hope
        cost = ~np.array(self._quality, dtype=bool)
        floor = np.minimum(np.array(data.front).min(axis=0), mean)
        return np.where(cost, np.maximum(hope, floor), hope)

    def _near_optimism(self, data: Data, rows: np.ndarray, optimism: np.ndarray) -> np.ndarray:
        """Per row (a candidate's features) and objective, its optimism: `optimism`, where the count bonus is on a
        cost's NEAR_COST_OPTIMISM (and a quality's, with NEAR_QUALITY) x 1/sqrt(1 + the trials near it)."""
        if NEAR_SCALE <= 0:
            return np.broadcast_to(optimism, (len(rows), len(optimism)))
        cost = ~np.array(self._quality, dtype=bool)
        base = np.where(cost, OPTIMISM * NEAR_COST_OPTIMISM, optimism)
        shrunk = cost | NEAR_QUALITY
        return np.where(shrunk, base * near_share(rows, data.seen, NEAR_SCALE)[:, None], base)

    def _most_accurate(self, front: list[list[float]], hope: np.ndarray) -> int | None:
        """The candidate whose optimistic point is best beyond the front in the measures of quality (each scaled by
        the front's range, or its size where the front has none), or None where none is beyond it."""
        cols = [i for i, q in enumerate(self._quality) if q]
        if not cols or not front:
            return None
        f = np.array(front)[:, cols]
        span = f.max(axis=0) - f.min(axis=0)
        span = np.where(span > 1e-12, span, np.maximum(np.abs(f).max(axis=0), 1.0))
        beyond = np.maximum(f.min(axis=0) - hope[:, cols], 0.0) / span
        score = beyond.sum(axis=1)
        best = int(np.argmax(score))
        return best if score[best] > 0 else None

    def _fit(self, data: Data) -> Model:
        """The model, refit for every new trial with a curve up to REFIT_ALL of them, then once they have grown by
        REFIT_GROWTH since its last fit (past that, a forest refit on every epoch of every trial, each trial, costs
        more than the few new rows would change)."""
        n = data.trials
        last = self._model[0] if self._model is not None else 0
        grown = last + 1 if last < REFIT_ALL else max(last + 1, (1 + REFIT_GROWTH) * last)
        if self._model is None or n >= grown:
            clocks = [c and lg for c, lg in zip(self._clocks, self._log)]
            self._model = (n, Model(data.x, data.y, clocks, self._seed))
        return self._model[1]


def applies(cfg: RunConfig) -> bool:
    """Whether candidates can be chosen here: several objectives, a sampler proposing a parameter at a time (its
    `SamplerKind`: candidates are drawn from it), the joint strategy (config/checks.py refuses a number above 1
    elsewhere; `auto` is then 1)."""
    kind = SAMPLERS.get(cfg.study.sampler)
    return cfg.multi_objective and kind is not None and kind.proposes == "parameter" and cfg.study.strategy == "joint"


def n_candidates(cfg: RunConfig) -> int:
    """`study.candidates`: a number as is; `auto`, AUTO_K where candidates apply (chosen only while worth their
    cost: `PredictedFront.worth_it`), else 1."""
    k = cfg.study.candidates
    if k == "auto":
        return AUTO_K if applies(cfg) else 1
    return int(k)


def wrap(inner: optuna.samplers.BaseSampler, cfg: RunConfig, seed: int | None) -> optuna.samplers.BaseSampler:
    """`inner` choosing among `n_candidates(cfg)` candidates per trial (as is where that is 1)."""
    k = n_candidates(cfg)
    if k <= 1 or not cfg.multi_objective:
        return inner
    return PredictedFront(inner, cfg, k, seed, auto=cfg.study.candidates == "auto")


__all__ = ["AUTO_K", "AUTO_SHARE", "Features", "Model", "PredictedFront", "applies", "draw",
           "gains", "hypervolume", "n_candidates", "wrap"]
