"""The report's data: every `*_data` function takes an optuna Study and the RunConfig and returns dicts and lists of
plain Python values (pure functions, tested); `build` gathers them all. The figures (report_figures.py) only draw
what these return."""

from __future__ import annotations

import math
import statistics
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core import redact
from autotune.search import feasible, results
from autotune.spec import PER_EPOCH, RunConfig, StudyRecord, TrialRecord, label


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _metrics(cfg: RunConfig) -> list[str]:
    return [o.metric for o in cfg.objectives]


def _trials(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False)


def measured(t: FrozenTrial, metric: str, metrics: list[str]) -> float | None:
    """A trial's value of `metric`: its objective value, else its final user attr, else its last epoch.

    Pruned trials have no objective values; their last epoch record says where they stopped.
    """
    if t.values is not None and metric in metrics:
        v = t.values[metrics.index(metric)]
        return float(v) if _finite(v) else None
    r = TrialRecord.of(t)
    v = r.metrics.get(metric)
    if _finite(v):
        return float(v)
    hist = r.history or []
    if hist and _finite(hist[-1].get(metric)):
        return float(hist[-1][metric])
    return None


def axes(cfg: RunConfig) -> tuple[str, str]:
    """(x, y) metrics of the trade-off plot: time on x and accuracy on y whenever they are measured."""
    m = _metrics(cfg)
    if "train_time_s" in m and "val_accuracy" in m:
        return "train_time_s", "val_accuracy"
    if len(m) >= 2:
        return m[1], m[0]
    return ("train_time_s", m[0]) if m[0] != "train_time_s" else ("val_accuracy", m[0])


def stop_group(t: FrozenTrial) -> str:
    """One label per trial for colouring: complete, early_stopped, a stop reason, or failed."""
    reason = TrialRecord.of(t).stop_reason
    if t.state == TrialState.COMPLETE:
        return "early_stopped" if reason == "early_stopped" else "complete"
    if t.state == TrialState.PRUNED:
        return reason or "pruned"
    if t.state == TrialState.FAIL:
        return "failed"
    return t.state.name.lower()


# ---------------------------------------------------------------- data


def pareto_data(study: optuna.Study, cfg: RunConfig) -> dict[str, Any]:
    """Every trial that measured both axes, with its category; the recommended trial marked.

    Categories: pareto (non-dominated, feasible), complete, infeasible (violates a constraint),
    pruned (plotted where it stopped), failed.
    """
    x, y = axes(cfg)
    metrics = _metrics(cfg)
    trials = _trials(study)
    front = {t.number for t in results.pareto_front(trials, cfg.directions)}
    best = results.best_trial(study, cfg)
    points = []
    for t in trials:
        if t.state == TrialState.RUNNING or t.state == TrialState.WAITING:
            continue
        xv, yv = measured(t, x, metrics), measured(t, y, metrics)
        if xv is None or yv is None:
            continue
        if t.state == TrialState.COMPLETE:
            category = "infeasible" if not feasible(t) else "pareto" if t.number in front else "complete"
        elif t.state == TrialState.PRUNED:
            category = "pruned"
        else:
            category = "failed"
        r = TrialRecord.of(t)
        points.append({"number": t.number, "x": xv, "y": yv, "category": category, "state": t.state.name,
                       "stop_reason": r.stop_reason, "stop_epoch": r.stop_epoch,
                       "recommended": best is not None and t.number == best.number, "params": dict(t.params)})
    return {"x_metric": x, "y_metric": y, "points": points,
            "front": sorted(front), "recommended": best.number if best is not None else None}


def history_data(study: optuna.Study, cfg: RunConfig) -> dict[str, Any]:
    """Per objective: each complete trial's value by trial number and the best value so far."""
    out: dict[str, Any] = {"objectives": []}
    complete = [t for t in _trials(study) if t.state == TrialState.COMPLETE and t.values is not None]
    for i, (metric, direction) in enumerate(zip(_metrics(cfg), cfg.directions)):
        numbers, values, best_so_far = [], [], []
        best: float | None = None
        for t in complete:
            v = t.values[i]
            if not _finite(v):
                continue
            better = best is None or (v > best if direction == "maximize" else v < best)
            best = v if better else best
            numbers.append(t.number)
            values.append(float(v))
            best_so_far.append(float(best))
        out["objectives"].append({"metric": metric, "direction": direction, "numbers": numbers, "values": values,
                                  "best_so_far": best_so_far})
    return out


def learning_curves(study: optuna.Study, cfg: RunConfig) -> dict[str, Any]:
    """Per-epoch records of every trial that ran an epoch, grouped by state / stop reason."""
    curves = []
    for t in _trials(study):
        r = TrialRecord.of(t)
        hist = r.history or []
        if not hist:
            continue
        curves.append({
            "number": t.number, "state": t.state.name, "group": stop_group(t),
            "stop_reason": r.stop_reason, "stop_epoch": r.stop_epoch,
            "epoch": [h["epoch"] for h in hist],
            **{k: [h.get(k) for h in hist] for k in PER_EPOCH},  # (train_loss among them)
        })
    groups = sorted({c["group"] for c in curves})
    return {"curves": curves, "groups": groups}


def importances(study: optuna.Study, cfg: RunConfig, min_trials: int = 3, seed: int = 0) -> dict[str, Any]:
    """fANOVA parameter importances per objective (optuna.importance), or why there are none yet."""
    complete = [t for t in _trials(study) if t.state == TrialState.COMPLETE and t.values is not None]
    out: dict[str, Any] = {"objectives": [], "n_complete": len(complete)}
    for i, metric in enumerate(_metrics(cfg)):
        entry: dict[str, Any] = {"metric": metric, "importances": {}, "error": None}
        if len(complete) < min_trials:
            entry["error"] = f"needs at least {min_trials} complete trials; the study has {len(complete)}"
        else:
            try:
                imp = optuna.importance.get_param_importances(
                    study, target=lambda t, i=i: t.values[i],
                    evaluator=optuna.importance.FanovaImportanceEvaluator(seed=seed))
                entry["importances"] = {k: float(v) for k, v in imp.items()}
                if not imp:
                    entry["error"] = "no parameter is shared by all complete trials"
            except (ValueError, RuntimeError, ZeroDivisionError) as e:  # too few or identical trials
                entry["error"] = f"{type(e).__name__}: {e}"
        out["objectives"].append(entry)
    return out


def parallel_data(study: optuna.Study, cfg: RunConfig) -> dict[str, Any]:
    """Parallel-coordinates columns over complete trials: searched params present in all of them + objectives.

    Categorical values become indices with tick labels; log-scaled floats are shown as log10.
    """
    metrics = _metrics(cfg)
    complete = [t for t in _trials(study) if t.state == TrialState.COMPLETE and t.values is not None
                and all(_finite(v) for v in t.values)]
    dims: list[dict[str, Any]] = []
    if not complete:
        return {"dimensions": dims, "numbers": [], "color_metric": metrics[0], "color": []}
    names = [n for n in complete[0].params if all(n in t.params for t in complete)]
    for name in names:
        dist = complete[0].distributions[name]
        vals = [t.params[name] for t in complete]
        if isinstance(dist, optuna.distributions.CategoricalDistribution):
            choices = [str(c) for c in dist.choices]
            choices += sorted({str(v) for v in vals} - set(choices))  # a resumed study may have changed its space
            dims.append({"label": name, "values": [choices.index(str(v)) for v in vals],
                         "tickvals": list(range(len(choices))), "ticktext": choices})
        elif getattr(dist, "log", False):
            dims.append({"label": f"log10 {name}", "values": [math.log10(float(v)) for v in vals]})
        else:
            dims.append({"label": name, "values": [float(v) for v in vals]})
    for i, m in enumerate(metrics):
        dims.append({"label": label(m), "values": [float(t.values[i]) for t in complete]})
    return {"dimensions": dims, "numbers": [t.number for t in complete], "color_metric": metrics[0],
            "color": [float(t.values[0]) for t in complete]}


def throughput_data(study: optuna.Study, cfg: RunConfig) -> dict[str, Any]:
    """Training throughput (samples/s) of finished trials, grouped by precision and by batch size."""
    metrics = _metrics(cfg)
    by: dict[str, dict[str, dict[str, list[Any]]]] = {"precision": {}, "batch_size": {}}
    for t in _trials(study):
        if t.state not in (TrialState.COMPLETE, TrialState.PRUNED):
            continue
        sps = measured(t, "samples_per_s", metrics)
        if sps is None:
            continue
        r = TrialRecord.of(t)
        settings = r.settings or {}
        keys = {"precision": settings.get("precision") if r.precision is None else r.precision,
                "batch_size": settings.get("batch_size") if r.batch_size_used is None else r.batch_size_used}
        for kind, key in keys.items():
            if key is None:
                continue
            group = by[kind].setdefault(str(key), {"numbers": [], "values": []})
            group["numbers"].append(t.number)
            group["values"].append(sps)

    def ordered(groups: dict[str, dict[str, list[Any]]], numeric: bool) -> list[dict[str, Any]]:
        keys = sorted(groups, key=lambda k: float(k) if numeric else k)
        return [{"key": k, "numbers": groups[k]["numbers"], "values": groups[k]["values"],
                 "median": statistics.median(groups[k]["values"]), "n": len(groups[k]["values"])} for k in keys]

    return {"by_precision": ordered(by["precision"], False), "by_batch_size": ordered(by["batch_size"], True)}


def top_trials(study: optuna.Study, cfg: RunConfig, n: int = 10) -> list[dict[str, Any]]:
    """The recommended trial, then the rest of the Pareto front, then other complete trials by the first objective."""
    metrics = _metrics(cfg)
    trials = _trials(study)
    front = {t.number for t in results.pareto_front(trials, cfg.directions)}
    best = results.best_trial(study, cfg)
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.values is not None]
    sign = -1.0 if cfg.directions[0] == "maximize" else 1.0

    def key(t: FrozenTrial) -> tuple[int, float]:
        rank = 0 if best is not None and t.number == best.number else 1 if t.number in front else 2
        v = t.values[0]
        return rank, sign * v if _finite(v) else math.inf

    rows = []
    for t in sorted(complete, key=key)[:n]:
        s = results.summarize(t, metrics)
        rows.append({"number": t.number, "recommended": best is not None and t.number == best.number,
                     "pareto": t.number in front, "feasible": s.feasible,
                     "values": s.values, "metrics": s.metrics, "precision": TrialRecord.of(t).precision,
                     "device": TrialRecord.of(t).device, "stop_reason": s.stop_reason, "params": s.params})
    return rows


def summary_data(study: optuna.Study, cfg: RunConfig) -> dict[str, Any]:
    trials = _trials(study)
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    reasons: dict[str, int] = {}
    for t in trials:
        r = TrialRecord.of(t).stop_reason
        if r:
            reasons[r] = reasons.get(r, 0) + 1
    best = results.best_trial(study, cfg)
    stored = StudyRecord.of(study)
    return {"study": study.study_name, "n_trials": len(trials), "states": counts, "stop_reasons": reasons,
            "objectives": [{"metric": o.metric, "direction": str(o.direction)} for o in cfg.objectives],
            "sampler": cfg.study.sampler, "device": stored.device,
            "versions": stored.versions if stored.versions is not None else {},
            "source": redact(str(stored.source if stored.source is not None else cfg.source)),
            "select": str(cfg.select if isinstance(cfg.select, str) else cfg.select.model_dump()),
            "recommended": _brief(results.summarize(best, _metrics(cfg))) if best is not None else None}


def _brief(s: results.TrialSummary) -> dict[str, Any]:
    return {"number": s.number, "params": s.params, "values": s.values, "metrics": s.metrics,
            "not_applied": s.not_applied}


def build(study: optuna.Study, cfg: RunConfig) -> dict[str, Any]:
    """All the report's data in one dict of plain values."""
    return {"summary": summary_data(study, cfg), "pareto": pareto_data(study, cfg),
            "history": history_data(study, cfg), "curves": learning_curves(study, cfg),
            "importances": importances(study, cfg), "parallel": parallel_data(study, cfg),
            "throughput": throughput_data(study, cfg), "top": top_trials(study, cfg)}
