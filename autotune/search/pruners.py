"""Stop rules that need the study: slow against the Pareto front, Optuna's pruners (one objective), and
Pareto-aware pruning for multi-objective studies.

Optuna refuses `trial.report` / `should_prune` when a study has several directions, so
each trial records its own per-epoch objective values in the user attr `epoch_values`
(a list, one entry per epoch, objectives known after every epoch only). `ParetoPruner` and
`ParetoASHAPruner` read those records; the objective calls their one method, `stop`, after
every epoch and stops the trial with the reason it returns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core import ConfigError, TrialStopped, lookup
from autotune.core import optuna_compat as compat
from autotune.search import curves, rungs
from autotune.search.pareto import dominates, hypervolume_2d, promoted_with_accurate
from autotune.search.results import pareto_front
from autotune.spec import RunConfig, TrialRecord, is_fraction, is_quality, per_epoch
from autotune.training import projected_time_s

EPOCH_VALUES = "epoch_values"  # TrialRecord.epoch_values's stored key (tests build trials with it)


def check_vs_front(elapsed_s: float, epoch: int, epochs: int, quality: float, factor: float | None,
                   front: list[FrozenTrial], metric: str = "val_accuracy", direction: str = "maximize") -> None:
    """Slower than `factor` x the slowest Pareto trial, and no better on `metric` (the study's quality objective)
    than the front was at this epoch."""
    if factor is None or not front:
        return
    records = [TrialRecord.of(t) for t in front]
    times = [s for r in records if (s := r.metric("train_time_s")) is not None]
    if not times:
        return
    proj = projected_time_s(elapsed_s, epoch, epochs)
    limit = factor * max(times)
    if proj <= limit:
        return
    seen = [h[metric] for r in records for h in r.history or [] if h["epoch"] == epoch and metric in h]
    if seen and (quality > max(seen) if direction == "maximize" else quality < min(seen)):
        return
    raise TrialStopped("slow", epoch, f"projected {proj:.1f}s > {factor:g} x slowest Pareto trial "
                                      f"({max(times):.1f}s) without a better {metric}")


FRONT_GAIN_STARTUP = 5  # completed trials before min_front_gain acts: a young front's best is no yardstick


def check_front_gain_in(study: optuna.Study, cfg: RunConfig, proj_s: float, at: str) -> None:
    """`check_front_gain` against the study's front, once it has FRONT_GAIN_STARTUP completed trials."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(done) >= FRONT_GAIN_STARTUP:
        check_front_gain(cfg, pareto_front(done, cfg.directions), proj_s, at)


def check_front_gain(cfg: RunConfig, front: list[FrozenTrial], proj_s: float, at: str) -> None:
    """Before a trial trains, its training time is known (the speed probe) and its accuracy is not: stop it,
    `dominated`, when even its best case, the front's best quality + `front_margin`, at its predicted time would
    add less than `min_front_gain` of the (quality, train_time_s) front's hypervolume (time reference:
    `vs_front` (else 2) x the slowest front trial's; quality reference: 0 for an accuracy, else the front's
    worst). A trial slower than the whole front must beat its best accuracy, and barely can; one in between
    adds the area between the front and its best case."""
    slow = cfg.pruning.slow
    metric, direction = quality_objective(cfg)
    if slow.min_front_gain is None or "train_time_s" not in [o.metric for o in cfg.objectives]:
        return
    pts = [(s, q) for r in map(TrialRecord.of, front)
           if (s := r.metric("train_time_s")) is not None and (q := r.metric(metric)) is not None]
    if not pts:
        return
    sign = -1.0 if direction == "maximize" else 1.0  # quality as a minimized number
    best = max(q for _, q in pts) if direction == "maximize" else min(q for _, q in pts)
    hoped = best - sign * slow.front_margin
    if is_fraction(metric):
        hoped = min(1.0, max(0.0, hoped))
    q_ref = 0.0 if is_fraction(metric) and direction == "maximize" else max(sign * q for _, q in pts)
    ref = ((slow.vs_front or 2.0) * max(t for t, _ in pts), q_ref)
    mine = [(t, sign * q) for t, q in pts]
    hv = hypervolume_2d(mine, ref)
    if hv <= 0:
        return
    gain = hypervolume_2d([*mine, (proj_s, sign * hoped)], ref) - hv
    if gain >= slow.min_front_gain * hv:
        return
    shown = ", ".join(f"{q:.4g} in {t:.1f}s" for t, q in sorted(pts)[:4]) + (" ..." if len(pts) > 4 else "")
    raise TrialStopped("dominated", 0, f"predicted {proj_s:.1f}s at {at} behind the front: even at "
                                       f"{metric} {hoped:.4g} (the front's best {best:.4g} + {slow.front_margin:g}) "
                                       f"it would add {gain / hv:.1%} to its hypervolume (< {slow.min_front_gain:.1%});"
                                       f" front: {shown}")


def quality_objective(cfg: RunConfig) -> tuple[str, str]:
    """The study's quality objective (accuracy, or the first that is not a clock or a size) and its direction."""
    quality = [o for o in cfg.objectives if is_quality(o.metric)]
    return (quality[0].metric, str(quality[0].direction)) if quality else ("val_accuracy", "maximize")


def _values_at(t: FrozenTrial, step: int) -> list[float] | None:
    rec = TrialRecord.of(t).epoch_values or []
    return list(rec[step - 1]) if len(rec) >= step else None


class ParetoStop(Protocol):
    """A multi-objective stop rule: why a trial with `current` objective values after epoch `step` (of `epochs`)
    should stop, given the study's other trials (COMPLETE, PRUNED, and RUNNING ones of other workers, whose stored
    curve so far is what they published at a rung: pareto_asha counts them, the others read finished trials
    alone); None to go on. `curve`: the trial's
    values after each epoch so far (the last one is `current`), for rules that judge where it is heading."""

    directions: list[str]

    def stop(self, current: list[float], step: int, trials: list[FrozenTrial], epochs: int,
             curve: list[list[float]] | None = None) -> str | None: ...

    def judges(self, step: int, epochs: int) -> bool:
        """Whether `stop` can say anything after epoch `step` of `epochs`: where it cannot, the caller need not read
        the study's trials (a storage round trip per epoch)."""
        ...


CUMULATIVE = ("train_time_s",)  # per-epoch metrics that add up over epochs: heading for value / step x epochs


def heading_for(curve: list[list[float]], epochs: int, metrics: Sequence[str],
                directions: Sequence[str]) -> list[float] | None:
    """Each objective's predicted value after the last epoch: a clock that adds up, extrapolated linearly; a
    quality metric, by its learning curve (curves.forecast); anything else, its last value. None when a quality
    curve cannot be fitted (too few epochs, a bad fit): there is no forecast to judge by."""
    step = len(curve)
    out = []
    for i, (m, d) in enumerate(zip(metrics, directions)):
        ys = [v[i] for v in curve]
        if m in CUMULATIVE:
            out.append(projected_time_s(ys[-1], step, epochs))
        elif is_quality(m):
            low, high = (0.0, 1.0) if is_fraction(m) else (-math.inf, math.inf)
            f = curves.forecast(ys, epochs, maximize=d == "maximize", low=low, high=high)
            if not f.fitted:
                return None
            out.append(f.value)
        else:
            out.append(ys[-1])
    return out


class ParetoPruner:
    """Stop a trial whose objective values at epoch k are dominated, by a margin, by a completed
    trial's values at epoch k. The margin is a share of each objective's spread among those trials.

    `forecast`: judge a trial by where it is heading instead: its predicted values after the last epoch
    (`heading_for`: the accuracy's learning curve, the time so far x epochs / epochs done) against the completed
    trials' final values, by the same margin; until its curve can be fitted, by the values at epoch k."""

    def __init__(self, directions: Sequence[str], n_startup_trials: int = 4, n_warmup_steps: int = 2,
                 margin: float = 0.05, forecast: bool = False, metrics: Sequence[str] | None = None,
                 keep_leaders: float | None = None) -> None:
        self.directions = list(directions)
        self.n_startup_trials = n_startup_trials
        self.n_warmup_steps = n_warmup_steps
        self.margin = margin
        self.forecast = bool(forecast)
        self.metrics = list(metrics) if metrics is not None else []
        if (self.forecast or keep_leaders is not None) and len(self.metrics) != len(self.directions):
            raise ValueError("forecast and keep_leaders need the name of every objective they compare (metrics)")
        if keep_leaders is not None and not 0 < keep_leaders < 1:
            raise ValueError(f"keep_leaders must be a share in (0, 1); got {keep_leaders}")
        self.keep_leaders = keep_leaders

    def stop(self, current: list[float], step: int, trials: list[FrozenTrial], epochs: int,
             curve: list[list[float]] | None = None) -> str | None:
        completed = [t for t in trials if t.state == TrialState.COMPLETE]
        if self.forecast:
            if not curve or step < self.n_warmup_steps or len(completed) < self.n_startup_trials:
                return None
            # Until its learning curve can be fitted, a trial is not judged at all: the values at epoch k are what
            # the forecast replaces (a slow learner behind fast ones at epoch 2 may end ahead of all of them).
            pred = heading_for(curve, epochs, self.metrics, self.directions)
            if pred is None:
                return None
            finals = [(t, list(rec[-1])) for t in completed if (rec := TrialRecord.of(t).epoch_values)]
            by = self._dominating(pred, finals)
            shown = ", ".join(f"{m} {v:.4g}" for m, v in zip(self.metrics, pred))
            return None if by is None else (f"heading for {shown} at epoch {epochs} (learning curve at epoch "
                                            f"{step}): dominated by trial {by.number}")
        by = self.dominated_by(current, step, completed)
        if by is not None and self.leads(current, step, completed):
            return None
        return None if by is None else f"dominated at epoch {step} by trial {by.number}"

    def judges(self, step: int, epochs: int) -> bool:
        return step >= self.n_warmup_steps

    def leads(self, current: list[float], step: int, completed: list[FrozenTrial]) -> bool:
        """`keep_leaders`: the trial's quality at `step` is in the top share of the completed trials' there. A slow
        learner that is dominated at epoch k (more time, less accuracy than a fast trial) but among the most
        accurate at k is where the front's accurate end comes from: it goes on."""
        if self.keep_leaders is None:
            return False
        quality = [i for i, m in enumerate(self.metrics) if is_quality(m)]
        if not quality:
            return False
        i = quality[0]
        sign = 1.0 if self.directions[i] == "maximize" else -1.0
        seen = sorted((sign * v[i] for t in completed if (v := _values_at(t, step)) is not None), reverse=True)
        if not seen:
            return False
        bar = seen[max(0, math.ceil(self.keep_leaders * len(seen)) - 1)]
        return sign * current[i] >= bar

    def dominated_by(self, current: list[float], step: int, completed: list[FrozenTrial]) -> FrozenTrial | None:
        """The completed trial that dominates `current` at `step` by the margin, if any."""
        if step < self.n_warmup_steps or len(completed) < self.n_startup_trials:
            return None
        return self._dominating(current, [(t, v) for t in completed if (v := _values_at(t, step)) is not None])

    def _dominating(self, current: list[float], refs: list[tuple[FrozenTrial, list[float]]]) -> FrozenTrial | None:
        if not refs:
            return None
        spreads = []
        for i in range(len(self.directions)):
            col = [v[i] for _, v in refs] + [current[i]]
            spreads.append(max(col) - min(col))
        for t, v in refs:
            if self._beats(v, current, spreads):
                return t
        return None

    def _beats(self, ref: list[float], cur: list[float], spreads: list[float]) -> bool:
        if not dominates(ref, cur, self.directions):
            return False
        for r, c, d, s in zip(ref, cur, self.directions, spreads):
            gain = (c - r) if d == "minimize" else (r - c)
            # better by a margin on every objective; a zero spread (identical trials) is no excuse
            if gain < self.margin * max(s, 0.01 * abs(c)):
                return False
        return True


# the trials in a rung's table: finished ones, and running ones whose curve so far is stored (other workers')
RUNG_STATES = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)


# a trial too alone at a rung to be ranked stops once its projected training passes this share of the study's
# timeout (none: a first configuration 11x the median's took over half of a 20-median-trial budget alone). On dev
# (bench/RESULTS.md, "A trial alone held to the run's time"), 1 worker, seeds 0-5: time to match the default's end
# 1.19x [0.90, 1.57], anytime hypervolume 1.16x [1.06, 1.30]; 1/4 gave 1.13x and 1.13x
ALONE_SHARE = 0.2


class ParetoASHAPruner:
    """Asynchronous multi-objective successive halving: at rung epochs min_epochs x eta^k (below the last epoch),
    a trial goes on only if it is among the top 1/eta of the rung table (itself and every trial that reached that
    rung: finished, or running on another worker, as ASHA's rung tables hold them), ranked by non-dominated
    sorting and crowding distance (`promoted`). With fewer than `n_startup_trials` others at the rung it goes on.

    `min_epochs: auto` (the default): the rungs are learned (search/rungs.py) from whether a rung's quality ranks
    agree with the next rung's over the trials' curves so far. `first_rung: optimistic` (the default): every rung
    cuts until those curves disprove it, so the first is the smallest epoch not disproven; `proven`: a rung cuts only
    once they prove it, and nothing is cut before. `accurate_share` of each rung's promotions go to the most accurate
    trials by quality alone (the rest by MOASHA over the others), so the slow accurate configurations a front's
    accurate end needs reach their last epoch. `metrics`: the objectives' names (the quality one is the first
    accuracy-like metric; else the first).

    A trial that runs alone with too few others at a rung to be ranked (the first trials on one worker) is still
    held to the run's time: where the study has a `timeout` (`budget_s`) and a clock objective, it stops once its
    projected training time passes `alone_share` of it (null: never). The timeout is wall time, so a trial slowed
    by other processes spends the run's time as surely as a slow configuration does."""

    def __init__(self, directions: Sequence[str], min_epochs: int | str = "auto", reduction_factor: int = 3,
                 n_startup_trials: int = 3, metrics: Sequence[str] | None = None, accurate_share: float = 1 / 3,
                 min_agreement: float = rungs.MIN_AGREEMENT, min_trials: int = rungs.MIN_TRIALS,
                 first_rung: Literal["optimistic", "proven"] = "optimistic",
                 alone_share: float | None = ALONE_SHARE) -> None:
        if min_epochs != "auto" and (not isinstance(min_epochs, int) or min_epochs < 1) or reduction_factor < 2:
            raise ValueError(f"needs min_epochs >= 1 (or auto) and reduction_factor >= 2; got {min_epochs}, "
                             f"{reduction_factor}")
        if not 0 <= accurate_share <= 1:
            raise ValueError(f"accurate_share must be a share in [0, 1]; got {accurate_share}")
        if first_rung not in ("optimistic", "proven"):
            raise ValueError(f"first_rung must be optimistic or proven; got {first_rung!r}")
        if alone_share is not None and not 0 < alone_share <= 1:
            raise ValueError(f"alone_share must be a share in (0, 1] or null; got {alone_share}")
        self.directions = list(directions)
        self.min_epochs = min_epochs
        self.eta = reduction_factor
        self.n_startup_trials = n_startup_trials
        self.accurate_share = accurate_share
        names = list(metrics or [])
        self.quality = next((i for i, m in enumerate(names) if is_quality(m)), 0)
        self.clock = names.index("train_time_s") if "train_time_s" in names else None
        self.alone_share = alone_share
        self.budget_s: float | None = None  # the study's timeout (set by the registry's builder)
        self._finished: dict[tuple[int, int, Any], list[float]] = {}  # finished trials' quality curves
        self.learned = (rungs.LearnedRungs(reduction_factor, min_agreement, min_trials, first_rung == "optimistic")
                        if min_epochs == "auto" else None)

    def rungs(self, max_epochs: int, trials: list[FrozenTrial] | None = None) -> list[int]:
        """The cutting rungs for a run of `max_epochs`: fixed, or learned from `trials` (the last learned ladder when
        none are given)."""
        if self.learned is not None:
            return self.learned.update(self._curves(trials), max_epochs) if trials is not None else self.learned.ladder
        out, r = [], int(self.min_epochs)
        while r < max_epochs:
            out.append(r)
            r *= self.eta
        return out

    def _curves(self, trials: list[FrozenTrial]) -> list[list[float]]:
        """Each rung-table trial's quality after every epoch so far, higher better."""
        sign = 1.0 if self.directions[self.quality] == "maximize" else -1.0
        out = []
        for t in trials:
            if t.state not in RUNG_STATES:
                continue
            # a finished trial's curve does not change: read once (every cut reads every trial's, thousands)
            key = (compat.trial_id(t), t.number, t.datetime_start)
            curve = self._finished.get(key)
            if curve is None:
                rec = TrialRecord.of(t).epoch_values or []
                curve = [sign * v[self.quality] for v in rec if len(v) > self.quality]
                if t.state.is_finished():
                    self._finished[key] = curve
            out.append(curve)
        return out

    def judges(self, step: int, epochs: int) -> bool:
        if self.learned is not None:  # the ladder, and the candidate first rungs below it (each refreshes it)
            first = self.learned.first
            return step in self.learned.ladder or (step in self.learned.candidates(epochs)
                                                   and (first is None or step < first))
        return step in self.rungs(epochs)

    def stop(self, current: list[float], step: int, trials: list[FrozenTrial], epochs: int,
             curve: list[list[float]] | None = None) -> str | None:
        peers = [t for t in trials if t.state in RUNG_STATES]
        over = self.over_budget(current, step, peers, epochs)
        if over is not None:
            return over
        if not self.cut(current, step, peers, epochs):
            return None
        learned = " (learned)" if self.learned is not None else ""
        return f"outside the non-dominated top 1/{self.eta} of the trials at rung epoch {step}{learned}"

    def over_budget(self, current: list[float], step: int, others: list[FrozenTrial], max_epochs: int) -> str | None:
        """Why a trial alone at rung `step` (a step `judges` passed) stops: no other trial runs, too few reached
        the rung to rank it, and its training time, projected linearly to `max_epochs`, is over `alone_share` of the
        study's timeout; None otherwise."""
        if (self.alone_share is None or not self.budget_s or self.clock is None or step >= max_epochs
                or len(current) <= self.clock):
            return None
        if any(t.state == TrialState.RUNNING for t in others):  # several workers: one slow trial holds one of them
            return None
        if sum(_values_at(t, step) is not None for t in others) >= self.n_startup_trials:
            return None
        projected = projected_time_s(current[self.clock], step, max_epochs)
        limit = self.alone_share * self.budget_s
        if not math.isfinite(projected) or projected <= limit:
            return None
        return (f"projected {projected:.0f}s of training, over {self.alone_share:g} of the study's timeout "
                f"({self.budget_s:g}s), with too few trials at rung epoch {step} to rank it")

    def cut(self, current: list[float], step: int, others: list[FrozenTrial], max_epochs: int) -> bool:
        if step not in self.rungs(max_epochs, others):
            return False
        peers = [v for t in others if (v := _values_at(t, step)) is not None]
        if len(peers) < self.n_startup_trials:
            return False
        return 0 not in promoted_with_accurate([current, *peers], self.directions, self.eta, self.quality,
                                               self.accurate_share)


# ---------------------------------------------------------------- the registry


def _nop(cfg: RunConfig, args: dict[str, Any]) -> optuna.pruners.BasePruner:
    return optuna.pruners.NopPruner()


def _threshold(cfg: RunConfig, args: dict[str, Any]) -> optuna.pruners.BasePruner:
    if not ({"lower", "upper"} & set(args)):
        # threshold on the objective itself: a maximized accuracy below `lower` is hopeless
        raise ConfigError(cfg.file, "pruning.pruner_args", "threshold needs lower or upper (e.g. {lower: 0.5})")
    return optuna.pruners.ThresholdPruner(**args)


def _hyperband(cfg: RunConfig, args: dict[str, Any]) -> optuna.pruners.BasePruner:
    args.setdefault("max_resource", int(cfg.fixed().get("epochs", 10)) if "epochs" not in cfg.space
                    else int(cfg.space["epochs"].high or 10))
    return optuna.pruners.HyperbandPruner(**args)


def _epoch_directions(cfg: RunConfig) -> list[str]:
    """The directions of the objectives known after every epoch: what the Pareto pruners compare."""
    return [str(o.direction) for o in cfg.objectives if per_epoch(o.metric)]


def _epoch_metrics(cfg: RunConfig) -> list[str]:
    return [o.metric for o in cfg.objectives if per_epoch(o.metric)]


def _pareto(cfg: RunConfig, args: dict[str, Any]) -> ParetoStop:
    return ParetoPruner(_epoch_directions(cfg), metrics=_epoch_metrics(cfg), **args)


def _pareto_asha(cfg: RunConfig, args: dict[str, Any]) -> ParetoStop:
    pruner = ParetoASHAPruner(_epoch_directions(cfg), metrics=_epoch_metrics(cfg), **args)
    pruner.budget_s = cfg.study.timeout
    return pruner


@dataclass(frozen=True)
class PrunerKind:
    """A registered pruner: its builder `(cfg, args)`, the studies it is for, autotune's defaults for its args."""

    build: Callable[[RunConfig, dict[str, Any]], Any]  # an Optuna BasePruner, or a ParetoStop (several)
    objectives: Literal["one", "several", "any"]  # one: Optuna's (trial.should_prune); several: autotune's Pareto
    defaults: Mapping[str, Any] = field(default_factory=dict)


def _optuna(cls: Callable[..., optuna.pruners.BasePruner]) -> Callable[[RunConfig, dict[str, Any]],
                                                                      optuna.pruners.BasePruner]:
    return lambda cfg, args: cls(**args)


PRUNERS: dict[str, PrunerKind] = {
    "none": PrunerKind(_nop, "any"),
    "median": PrunerKind(_optuna(optuna.pruners.MedianPruner), "one", {"n_startup_trials": 4, "n_warmup_steps": 2}),
    "percentile": PrunerKind(_optuna(optuna.pruners.PercentilePruner), "one", {"percentile": 25.0}),
    "successive_halving": PrunerKind(_optuna(optuna.pruners.SuccessiveHalvingPruner), "one"),
    "hyperband": PrunerKind(_hyperband, "one", {"min_resource": 1}),
    "threshold": PrunerKind(_threshold, "one"),
    "wilcoxon": PrunerKind(_optuna(optuna.pruners.WilcoxonPruner), "one"),
    "pareto": PrunerKind(_pareto, "several"),
    "pareto_asha": PrunerKind(_pareto_asha, "several"),
}
# `pruner: auto` by the study's number of objectives (several: measured on bench/replay.py, bench/RESULTS.md)
AUTO = {"one": "median", "several": "pareto_asha"}


def resolved_name(cfg: RunConfig) -> str:
    """The registered pruner a config's `pruning.pruner` means (auto by its number of objectives)."""
    name = cfg.pruning.pruner
    return AUTO["several" if cfg.multi_objective else "one"] if name == "auto" else name


def build(cfg: RunConfig, name: str) -> Any:
    """Registered pruner `name` with autotune's defaults under `pruning.pruner_args`; bad args are a ConfigError."""
    kind = lookup(PRUNERS, name, cfg.file, "pruning.pruner", "pruner")
    try:
        return kind.build(cfg, {**kind.defaults, **cfg.pruning.pruner_args})
    except (TypeError, ValueError) as e:
        raise ConfigError(cfg.file, "pruning.pruner_args", f"{name}: {e}") from None


def optuna_pruner(cfg: RunConfig) -> optuna.pruners.BasePruner:
    """Optuna's own pruner for a single-objective study (multi-objective: Optuna gets NopPruner)."""
    name = resolved_name(cfg)
    if cfg.multi_objective or PRUNERS[name].objectives != "one":
        return optuna.pruners.NopPruner()
    return build(cfg, name)


def pareto_pruner(cfg: RunConfig) -> ParetoStop | None:
    """autotune's own pruner for a multi-objective study (auto = pareto_asha), over the objectives known after every
    epoch (size and latency are known only at the end): None when fewer than two are, or the pruner is none."""
    name = resolved_name(cfg)
    if not cfg.multi_objective or PRUNERS[name].objectives != "several":
        return None
    pruner = build(cfg, name)  # built either way: its arguments are checked
    return pruner if len(_epoch_directions(cfg)) >= 2 else None


def front_of(study: optuna.Study, cfg: RunConfig) -> list[FrozenTrial]:
    return pareto_front(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), cfg.directions)
