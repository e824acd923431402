"""Plain views of a study's trials: summaries, the Pareto front, and the rule that picks `best`.

Pure functions over Optuna's FrozenTrial; no drawing, no storage writes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.search.pareto import dominates
from autotune.spec import CATALOGUE, EPOCH_FIELDS, FastestWithin, MostAccurateUnder, RunConfig, TrialRecord, is_fraction

if TYPE_CHECKING:
    from autotune.training import EpochRecord



@dataclass
class TrialSummary:
    number: int
    state: str
    params: dict[str, Any]  # the searched values that took effect (not the `not_applied` ones)
    values: dict[str, float]  # objective metric -> value
    metrics: dict[str, float]  # every measured metric
    # per epoch as the trial's `history` user attr stores it: flat dicts, EpochRecord.as_dict(); `records()` gives
    # the EpochRecords a TrainResult.history holds
    history: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    stop_epoch: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    feasible: bool = True
    not_applied: dict[str, str] = field(default_factory=dict)  # searched settings that took no effect, and why
    # (left out of `params`, of the printed recommendation and of `best --export`)
    # settings fixed in `train:` that took no effect (a framework held another value: Lightning's bf16 for fp16 on a
    # CPU; the module's own optimizer kept its weight_decay), and why: `best` says so; the export keeps them as the
    # file fixed them, which trains the trial again as it was
    fixed_not_applied: dict[str, str] = field(default_factory=dict)
    seed: int | None = None  # the training seed (what reproduces it)
    # torch threads autotune chose for it (a cap after an oversubscribed trial, less one per loader worker; None:
    # its own cpu_threads, or torch's default): `best` shows it and `best --export` writes it as cpu_threads
    cpu_threads_used: int | None = None
    cpu_threads_capped: bool = False
    # a chosen lr multiplied the fit's own optimizer's group lrs: (those lrs, the rates it trained at), else None
    effective_lrs: tuple[list[float], list[float]] | None = None
    # settings the trial left to the user's code or the framework's defaults (a framework's loop): what they held
    recipe: dict[str, Any] = field(default_factory=dict)

    def lr_note(self) -> str | None:
        """What a searched lr meant on the fit's own optimizer (its multiplier), or None."""
        lr = self.params.get("lr", self.settings.get("lr"))  # searched, or fixed in train:
        if self.effective_lrs is None or lr is None:
            return None
        return lr_scaling_text(float(lr), *self.effective_lrs)

    def recipe_text(self) -> str:
        """`lr_schedule linear, epochs 3, optimizer adamw_torch_fused (the Trainer's optim)`: what the trial left to
        the user's code or the framework's defaults ('' when it left nothing)."""
        def shown(v: Any) -> str:
            return f"{v:.4g}" if isinstance(v, float) else str(v)

        return ", ".join(f"{k} {shown(v)}" for k, v in self.recipe.items())

    def records(self) -> list[EpochRecord]:
        """`history` as EpochRecords, the type of `TrainResult.history` (`rec.epoch`, `rec.val_accuracy`); a clock
        an old record lacks is NaN, a meter's reading it lacks (peak_memory_mb, energy_j: a field with a default)
        None. A stored epoch's keys other than the record's own fields (spec.EPOCH_FIELDS) are reported metrics."""
        import dataclasses

        from autotune.training import EpochRecord

        required = {f.name for f in dataclasses.fields(EpochRecord) if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING}
        return [EpochRecord(epoch=int(h.get("epoch", n)), metrics={k: v for k, v in h.items() if k != "epoch" and
                                                                   k not in EPOCH_FIELDS},
                            **{k: float(h.get(k, math.nan)) for k in EPOCH_FIELDS if k in h or k in required})
                for n, h in enumerate(self.history, start=1)]

    def row(self) -> dict[str, Any]:
        """A flat dict for tables and DataFrames."""
        out: dict[str, Any] = {"number": self.number, "state": self.state, "stop_reason": self.stop_reason}
        out.update({f"params_{k}": v for k, v in self.params.items()})
        out.update(self.metrics)
        out["feasible"] = self.feasible
        return out


def lr_scaling_text(lr: float, own: list[float], effective: list[float]) -> str:
    """`lr 0.0031 multiplies your optimizer's group lrs (6.4, 0.1) → (0.0198, 0.00031)`."""
    def shown(lrs: list[float]) -> str:
        return ", ".join(f"{v:.3g}" for v in lrs)

    return f"lr {lr:.3g} multiplies your optimizer's group lrs ({shown(own)}) → ({shown(effective)})"


def summarize(t: FrozenTrial, metrics: list[str]) -> TrialSummary:
    """A trial as its record (`TrialRecord`) and Optuna's own fields show it, by the study's objectives."""
    r = TrialRecord.of(t)
    stored = r.not_applied or {}
    unused = {k: why for k, why in stored.items() if k in t.params}  # searched, no effect
    values = dict(zip(metrics, t.values)) if t.values is not None else {}
    keys = dict.fromkeys([*metrics, *CATALOGUE])  # the objectives first: user metrics (val_f1...) too
    measured = {k: v for k in keys if (v := r.metric(k)) is not None}
    return TrialSummary(
        number=t.number, state=t.state.name, params={k: v for k, v in t.params.items() if k not in unused},
        values=values, metrics=measured,
        history=list(r.history or []), stop_reason=r.stop_reason, stop_epoch=r.stop_epoch,
        settings=dict(r.settings or {}),
        feasible=feasible(t), not_applied=unused, seed=r.seed,
        fixed_not_applied={k: why for k, why in stored.items() if k not in t.params},
        # (older: only the cap)
        cpu_threads_used=r.cpu_threads_used if r.cpu_threads_used is not None else r.cpu_threads_capped,
        cpu_threads_capped=r.cpu_threads_capped is not None,
        effective_lrs=(list(r.own_group_lrs), list(r.effective_lrs)) if r.effective_lrs is not None and
        r.own_group_lrs is not None else None,
        recipe=dict(r.recipe or {}),
    )


def feasible(t: FrozenTrial) -> bool:
    """The trial satisfies every constraint (each value <= 0); a trial without constraints is feasible.

    Optuna 5 stores `trial.set_constraint(key, v)` (study/judge.py: `accuracy_drop`) as a `constraints:KEY`
    system attr and a sampler's `constraints_func` as a `constraints` list; `FrozenTrial.constraints`
    gathers both."""
    return all(float(v) <= 0 for v in t.constraints.values())


def pareto_front(trials: list[FrozenTrial], directions: list[str]) -> list[FrozenTrial]:
    """Non-dominated COMPLETE (and feasible, when constrained) trials, in trial order."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.values is not None
            and all(math.isfinite(v) for v in t.values)]
    pool = [t for t in done if feasible(t)] or done
    return [t for t in pool if not any(dominates(list(o.values), list(t.values), directions) for o in pool
                                       if o is not t)]


def select(front: list[FrozenTrial], cfg: RunConfig) -> FrozenTrial | None:
    """The recommended trade-off on the front, by the config's `select` rule."""
    if not front:
        return None
    metrics = [o.metric for o in cfg.objectives]
    if len(metrics) == 1:
        return front[0] if len(front) == 1 else _best_single(front, cfg.directions[0])
    rule = cfg.select

    def metric(t: FrozenTrial, key: str) -> float:
        if key in metrics:
            return float(t.values[metrics.index(key)])
        v = TrialRecord.of(t).metric(key)
        return math.nan if v is None else v

    if isinstance(rule, FastestWithin):
        best_acc = max(metric(t, "val_accuracy") for t in front)
        ok = [t for t in front if metric(t, "val_accuracy") >= best_acc - rule.fastest_within]
        return min(ok, key=lambda t: metric(t, "train_time_s"))
    if isinstance(rule, MostAccurateUnder):
        ok = [t for t in front if metric(t, "train_time_s") <= rule.most_accurate_under_s]
        if not ok:
            return min(front, key=lambda t: metric(t, "train_time_s"))
        return max(ok, key=lambda t: metric(t, "val_accuracy"))
    return knee(front, cfg.directions, metrics)


def _best_single(trials: list[FrozenTrial], direction: str) -> FrozenTrial:
    key = (lambda t: t.values[0]) if direction == "minimize" else (lambda t: -t.values[0])
    return min(trials, key=key)


def knee(front: list[FrozenTrial], directions: list[str], metrics: list[str] | None = None) -> FrozenTrial:
    """The front point closest to the ideal point, each objective compared as a ratio to its best.

    Accuracy is compared as error rate, time as seconds: halving the error weighs the same as
    halving the time, so a trial 1.1x slower but with a third of the errors wins. A maximized metric the
    catalogue does not know (a training function's `val_f1`) is read by its values as accuracy is: within [0, 1]
    it is a share, compared by its error rate, whatever its name (read as a raw value, its 0 on the front sent it
    alone to range scaling). Objectives that are not positive fall back to the front's range scaled to [0, 1].
    """
    metrics = metrics or [""] * len(directions)
    vals = [list(t.values) for t in front]
    columns = []
    for i, (d, m) in enumerate(zip(directions, metrics)):
        col = [v[i] for v in vals]
        if d == "maximize" and all(0 <= x <= 1 for x in col) and (m not in CATALOGUE or is_fraction(m)):
            col, d = [max(1 - x, 1e-4) for x in col], "minimize"  # accuracy -> error rate
        if all(x > 0 for x in col):
            best = min(col) if d == "minimize" else max(col)
            columns.append([abs(math.log(x / best)) for x in col])
        else:
            lo, hi = min(col), max(col)
            span = hi - lo or 1.0
            columns.append([(x - lo) / span if d == "minimize" else (hi - x) / span for x in col])
    dist = [math.sqrt(sum(c[j] ** 2 for c in columns)) for j in range(len(front))]
    return front[dist.index(min(dist))]


def best_trial(study: optuna.Study, cfg: RunConfig) -> FrozenTrial | None:
    trials = study.get_trials(deepcopy=False)
    return select(pareto_front(trials, cfg.directions), cfg)


def best_summary(study: optuna.Study, cfg: RunConfig) -> TrialSummary | None:
    """The recommended trial, summarized by the config's objectives (`TuneResult.best`, a distillation teacher)."""
    t = best_trial(study, cfg)
    return summarize(t, [o.metric for o in cfg.objectives]) if t is not None else None
