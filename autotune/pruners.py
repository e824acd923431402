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

from .config import RunConfig
from .errors import ConfigError, TrialStopped, lookup
from .metrics import per_epoch
from .results import dominates, pareto_front
from .stops import projected_time_s

EPOCH_VALUES = "epoch_values"  # user attr: list[list[float]], objective values after each epoch


def check_vs_front(elapsed_s: float, epoch: int, epochs: int, quality: float, factor: float | None,
                   front: list[FrozenTrial], metric: str = "val_accuracy", direction: str = "maximize") -> None:
    """Slower than `factor` x the slowest Pareto trial, and no better on `metric` (the study's quality objective)
    than the front was at this epoch."""
    if factor is None or not front:
        return
    times = [float(t.user_attrs["train_time_s"]) for t in front if "train_time_s" in t.user_attrs]
    if not times:
        return
    proj = projected_time_s(elapsed_s, epoch, epochs)
    limit = factor * max(times)
    if proj <= limit:
        return
    seen = [h[metric] for t in front for h in t.user_attrs.get("history", []) if h["epoch"] == epoch and metric in h]
    if seen and (quality > max(seen) if direction == "maximize" else quality < min(seen)):
        return
    raise TrialStopped("slow", epoch, f"projected {proj:.1f}s > {factor:g} x slowest Pareto trial "
                                      f"({max(times):.1f}s) without a better {metric}")


def _values_at(t: FrozenTrial, step: int) -> list[float] | None:
    rec = t.user_attrs.get(EPOCH_VALUES) or []
    return list(rec[step - 1]) if len(rec) >= step else None


class ParetoStop(Protocol):
    """A multi-objective stop rule: why a trial with `current` objective values after epoch `step` (of `epochs`)
    should stop, given the study's finished trials (COMPLETE and PRUNED); None to go on."""

    directions: list[str]

    def stop(self, current: list[float], step: int, trials: list[FrozenTrial], epochs: int) -> str | None: ...


class ParetoPruner:
    """Stop a trial whose objective values at epoch k are dominated, by a margin, by a completed
    trial's values at epoch k. The margin is a share of each objective's spread among those trials."""

    def __init__(self, directions: Sequence[str], n_startup_trials: int = 4, n_warmup_steps: int = 2,
                 margin: float = 0.05) -> None:
        self.directions = list(directions)
        self.n_startup_trials = n_startup_trials
        self.n_warmup_steps = n_warmup_steps
        self.margin = margin

    def stop(self, current: list[float], step: int, trials: list[FrozenTrial], epochs: int) -> str | None:
        by = self.dominated_by(current, step, [t for t in trials if t.state == TrialState.COMPLETE])
        return None if by is None else f"dominated at epoch {step} by trial {by.number}"

    def dominated_by(self, current: list[float], step: int, completed: list[FrozenTrial]) -> FrozenTrial | None:
        """The completed trial that dominates `current` at `step` by the margin, if any."""
        if step < self.n_warmup_steps or len(completed) < self.n_startup_trials:
            return None
        refs = [(t, v) for t in completed if (v := _values_at(t, step)) is not None]
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


def nondominated_ranks(points: list[list[float]], directions: list[str]) -> list[int]:
    """Front index of each point (0 = non-dominated) by repeated peeling."""
    ranks = [-1] * len(points)
    left = set(range(len(points)))
    r = 0
    while left:
        front = {i for i in left if not any(dominates(points[j], points[i], directions) for j in left if j != i)}
        for i in front:
            ranks[i] = r
        left -= front
        r += 1
    return ranks


class ParetoASHAPruner:
    """Successive halving on Pareto ranks: at rung epochs min_epochs x eta^k, a trial survives only
    if it sits in the non-dominated top 1/eta of all trials that reached that rung."""

    def __init__(self, directions: Sequence[str], min_epochs: int = 1, reduction_factor: int = 3,
                 n_startup_trials: int = 3) -> None:
        self.directions = list(directions)
        self.min_epochs = min_epochs
        self.eta = reduction_factor
        self.n_startup_trials = n_startup_trials

    def rungs(self, max_epochs: int) -> list[int]:
        out, r = [], self.min_epochs
        while r < max_epochs:
            out.append(r)
            r *= self.eta
        return out

    def stop(self, current: list[float], step: int, trials: list[FrozenTrial], epochs: int) -> str | None:
        peers = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        return "outside the non-dominated top 1/eta at this rung" if self.cut(current, step, peers, epochs) else None

    def cut(self, current: list[float], step: int, others: list[FrozenTrial], max_epochs: int) -> bool:
        if step not in self.rungs(max_epochs) and not (step == self.min_epochs):
            return False
        peers = [v for t in others if (v := _values_at(t, step)) is not None]
        if len(peers) < self.n_startup_trials:
            return False
        ranks = nondominated_ranks([current, *peers], self.directions)
        n_keep = max(1, math.ceil((len(peers) + 1) / self.eta))
        ahead = sum(1 for r in ranks[1:] if r < ranks[0])
        return ahead >= n_keep


# ---------------------------------------------------------------- the registry


def _file(cfg: RunConfig) -> str:
    return cfg.source.rsplit("/", 1)[-1]


def _nop(cfg: RunConfig, args: dict[str, Any]) -> optuna.pruners.BasePruner:
    return optuna.pruners.NopPruner()


def _threshold(cfg: RunConfig, args: dict[str, Any]) -> optuna.pruners.BasePruner:
    if not ({"lower", "upper"} & set(args)):
        # threshold on the objective itself: a maximized accuracy below `lower` is hopeless
        raise ConfigError(_file(cfg), "pruning.pruner_args", "threshold needs lower or upper (e.g. {lower: 0.5})")
    return optuna.pruners.ThresholdPruner(**args)


def _hyperband(cfg: RunConfig, args: dict[str, Any]) -> optuna.pruners.BasePruner:
    args.setdefault("max_resource", int(cfg.fixed().get("epochs", 10)) if "epochs" not in cfg.space
                    else int(cfg.space["epochs"].high or 10))
    return optuna.pruners.HyperbandPruner(**args)


def _epoch_directions(cfg: RunConfig) -> list[str]:
    """The directions of the objectives known after every epoch: what the Pareto pruners compare."""
    return [str(o.direction) for o in cfg.objectives if per_epoch(o.metric)]


def _pareto(cfg: RunConfig, args: dict[str, Any]) -> ParetoStop:
    return ParetoPruner(_epoch_directions(cfg), **args)


def _pareto_asha(cfg: RunConfig, args: dict[str, Any]) -> ParetoStop:
    return ParetoASHAPruner(_epoch_directions(cfg), **args)


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
AUTO = {"one": "median", "several": "pareto"}  # `pruner: auto` by the study's number of objectives


def resolved_name(cfg: RunConfig) -> str:
    """The registered pruner a config's `pruning.pruner` means (auto by its number of objectives)."""
    name = cfg.pruning.pruner
    return AUTO["several" if cfg.multi_objective else "one"] if name == "auto" else name


def build(cfg: RunConfig, name: str) -> Any:
    """Registered pruner `name` with autotune's defaults under `pruning.pruner_args`; bad args are a ConfigError."""
    kind = lookup(PRUNERS, name, _file(cfg), "pruning.pruner", "pruner")
    try:
        return kind.build(cfg, {**kind.defaults, **cfg.pruning.pruner_args})
    except (TypeError, ValueError) as e:
        raise ConfigError(_file(cfg), "pruning.pruner_args", f"{name}: {e}") from None


def optuna_pruner(cfg: RunConfig) -> optuna.pruners.BasePruner:
    """Optuna's own pruner for a single-objective study (multi-objective: Optuna gets NopPruner)."""
    name = resolved_name(cfg)
    if cfg.multi_objective or PRUNERS[name].objectives != "one":
        return optuna.pruners.NopPruner()
    return build(cfg, name)


def pareto_pruner(cfg: RunConfig) -> ParetoStop | None:
    """autotune's own pruner for a multi-objective study (auto = pareto), over the objectives known after every
    epoch (size and latency are known only at the end): None when fewer than two are, or the pruner is none."""
    name = resolved_name(cfg)
    if not cfg.multi_objective or PRUNERS[name].objectives != "several":
        return None
    pruner = build(cfg, name)  # built either way: its arguments are checked
    return pruner if len(_epoch_directions(cfg)) >= 2 else None


def front_of(study: optuna.Study, cfg: RunConfig) -> list[FrozenTrial]:
    return pareto_front(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), cfg.directions)
