"""A study as pictures: plain data first (pure functions, tested), then Plotly figures, then one HTML file.

Every `*_data` function takes an optuna Study and the RunConfig and returns dicts and lists of plain
Python values; the `*_figure` functions only draw what those return. `write` puts all figures into one
self-contained HTML file with plotly.js inline, so it opens offline and can be mailed around.
"""

from __future__ import annotations

import html
import math
import os
import statistics
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core._errors import redact
from autotune.core._metrics import PER_EPOCH, label, shown_with
from autotune.core._metrics import fmt as fmt_metric
from autotune.search import _results as results
from autotune.search._results import feasible
from autotune.spec._schema import RunConfig

# Colour per point category / learning-curve group; stop reasons share the pruned hue family.
COLORS = {
    "recommended": "#d62728", "pareto": "#1f77b4", "complete": "#7fb3e0", "infeasible": "#9467bd",
    "pruned": "#ff7f0e", "failed": "#7f7f7f", "early_stopped": "#2ca02c",
    "dominated": "#ff7f0e", "diverged": "#8c564b", "slow": "#e377c2", "oom": "#bcbd22", "unsupported": "#17becf",
    "error": "#7f7f7f",
}
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
    v = t.user_attrs.get(metric)
    if _finite(v):
        return float(v)
    hist = t.user_attrs.get("history") or []
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
    reason = t.user_attrs.get("stop_reason")
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
        points.append({"number": t.number, "x": xv, "y": yv, "category": category, "state": t.state.name,
                       "stop_reason": t.user_attrs.get("stop_reason"), "stop_epoch": t.user_attrs.get("stop_epoch"),
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
        hist = t.user_attrs.get("history") or []
        if not hist:
            continue
        curves.append({
            "number": t.number, "state": t.state.name, "group": stop_group(t),
            "stop_reason": t.user_attrs.get("stop_reason"), "stop_epoch": t.user_attrs.get("stop_epoch"),
            "epoch": [h["epoch"] for h in hist],
            **{k: [h.get(k) for h in hist] for k in ("train_loss", *PER_EPOCH)},
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
        settings = t.user_attrs.get("settings", {})
        keys = {"precision": t.user_attrs.get("precision", settings.get("precision")),
                "batch_size": t.user_attrs.get("batch_size_used", settings.get("batch_size"))}
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
                     "values": s.values, "metrics": s.metrics, "precision": t.user_attrs.get("precision"),
                     "device": t.user_attrs.get("device"), "stop_reason": s.stop_reason, "params": s.params})
    return rows


def summary_data(study: optuna.Study, cfg: RunConfig) -> dict[str, Any]:
    trials = _trials(study)
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    reasons: dict[str, int] = {}
    for t in trials:
        r = t.user_attrs.get("stop_reason")
        if r:
            reasons[r] = reasons.get(r, 0) + 1
    best = results.best_trial(study, cfg)
    ua = study.user_attrs
    return {"study": study.study_name, "n_trials": len(trials), "states": counts, "stop_reasons": reasons,
            "objectives": [{"metric": o.metric, "direction": str(o.direction)} for o in cfg.objectives],
            "sampler": cfg.study.sampler, "device": ua.get("device"), "versions": ua.get("versions", {}),
            "source": redact(str(ua.get("source", cfg.source))), "select": str(cfg.select if isinstance(cfg.select, str)
                                                                  else cfg.select.model_dump()),
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


# ---------------------------------------------------------------- figures (drawing only)


def _hover(p: dict[str, Any]) -> str:
    params = "<br>".join(f"{k}={_fmt(v)}" for k, v in p["params"].items())
    stop = f"<br>stopped: {p['stop_reason']} @ epoch {p['stop_epoch']}" if p.get("stop_reason") else ""
    return f"trial {p['number']} ({p['state'].lower()}){stop}<br>{params}"


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def pareto_figure_from(d: dict[str, Any]) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    names = {"pareto": "Pareto front", "complete": "complete", "infeasible": "infeasible (constraint)",
             "pruned": "pruned (where it stopped)", "failed": "failed"}
    symbols = {"pareto": "circle", "complete": "circle-open", "infeasible": "x", "pruned": "triangle-down-open",
               "failed": "x-thin-open"}
    for cat in ("complete", "pruned", "failed", "infeasible", "pareto"):
        pts = [p for p in d["points"] if p["category"] == cat]
        if not pts:
            continue
        if cat == "pareto":
            pts = sorted(pts, key=lambda p: p["x"])
        fig.add_trace(go.Scatter(
            x=[p["x"] for p in pts], y=[p["y"] for p in pts], name=names[cat],
            mode="lines+markers" if cat == "pareto" else "markers",
            line={"shape": "hv", "color": COLORS[cat]} if cat == "pareto" else None,
            marker={"color": COLORS[cat], "size": 10 if cat == "pareto" else 8, "symbol": symbols[cat]},
            text=[_hover(p) for p in pts], hoverinfo="text+x+y"))
    rec = [p for p in d["points"] if p["recommended"]]
    if rec:
        fig.add_trace(go.Scatter(x=[rec[0]["x"]], y=[rec[0]["y"]], name=f"recommended (trial {rec[0]['number']})",
                                 mode="markers", marker={"color": COLORS["recommended"], "size": 18, "symbol": "star",
                                                         "line": {"width": 1, "color": "black"}},
                                 text=[_hover(rec[0])], hoverinfo="text+x+y"))
    fig.update_layout(title="Trade-off: " + label(d["y_metric"]) + " vs " + label(d["x_metric"]),
                      xaxis_title=label(d["x_metric"]), yaxis_title=label(d["y_metric"]), height=520,
                      template="plotly_white", legend={"orientation": "h", "y": -0.18})
    return fig


def pareto_figure(study: optuna.Study, cfg: RunConfig) -> Any:
    """The trade-off plot as a plotly Figure (for notebooks: display it inline)."""
    return pareto_figure_from(pareto_data(study, cfg))


def history_figure(d: dict[str, Any]) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    objs = d["objectives"]
    fig = make_subplots(rows=1, cols=len(objs), subplot_titles=[f"{label(o['metric'])} ({o['direction']})"
                                                                for o in objs])
    for i, o in enumerate(objs, start=1):
        fig.add_trace(go.Scatter(x=o["numbers"], y=o["values"], mode="markers", name=f"{o['metric']}",
                                 marker={"color": COLORS["pareto"]}, showlegend=i == 1, legendgroup="v"), 1, i)
        fig.add_trace(go.Scatter(x=o["numbers"], y=o["best_so_far"], mode="lines", name="best so far",
                                 line={"shape": "hv", "color": COLORS["recommended"]}, showlegend=i == 1,
                                 legendgroup="b"), 1, i)
        fig.update_xaxes(title_text="trial", row=1, col=i)
    fig.update_layout(title="Optimization history (complete trials)", height=420, template="plotly_white")
    return fig


def curves_figure(d: dict[str, Any]) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=["validation accuracy", "training loss (log scale)"])
    shown: set[str] = set()
    for c in d["curves"]:
        g = c["group"]
        color = COLORS.get(g, "#333333")
        dash = None if c["state"] == "COMPLETE" else "dot"
        for col, key in ((1, "val_accuracy"), (2, "train_loss")):
            fig.add_trace(go.Scatter(
                x=c["epoch"], y=c[key], mode="lines+markers", line={"color": color, "dash": dash, "width": 1.5},
                marker={"size": 4}, name=g, legendgroup=g, showlegend=g not in shown and col == 1,
                hovertext=f"trial {c['number']} ({g})", hoverinfo="text+y"), 1, col)
        shown.add(g)
    fig.update_xaxes(title_text="epoch")
    fig.update_yaxes(type="log", row=1, col=2)  # one diverging trial would flatten every other curve
    fig.update_layout(title="Learning curves, coloured by state / stop reason (dotted: stopped early)", height=440,
                      template="plotly_white")
    return fig


def importances_figure(d: dict[str, Any]) -> Any | None:
    import plotly.graph_objects as go

    objs = [o for o in d["objectives"] if o["importances"]]
    if not objs:
        return None
    fig = go.Figure()
    params = sorted({p for o in objs for p in o["importances"]},
                    key=lambda p: sum(o["importances"].get(p, 0.0) for o in objs))
    for o in objs:
        fig.add_trace(go.Bar(y=params, x=[o["importances"].get(p, 0.0) for p in params], orientation="h",
                             name=label(o["metric"])))
    fig.update_layout(title="Parameter importances per objective (fANOVA)", barmode="group",
                      height=max(320, 28 * len(params) * len(objs) + 120), template="plotly_white",
                      xaxis_title="importance (sums to 1 per objective)")
    return fig


def parallel_figure(d: dict[str, Any]) -> Any | None:
    import plotly.graph_objects as go

    if not d["numbers"]:
        return None
    dims = []
    for dim in d["dimensions"]:
        one = {"label": dim["label"], "values": dim["values"]}
        if "tickvals" in dim:
            one.update(tickvals=dim["tickvals"], ticktext=dim["ticktext"])
        dims.append(one)
    fig = go.Figure(go.Parcoords(line={"color": d["color"], "colorscale": "Viridis", "showscale": True,
                                       "colorbar": {"title": {"text": d["color_metric"]}}}, dimensions=dims))
    fig.update_layout(title=f"Parallel coordinates (complete trials, coloured by {d['color_metric']})", height=480,
                      margin={"l": 80, "r": 80})
    return fig


def throughput_figure(d: dict[str, Any]) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=["by precision", "by batch size"])
    for col, key in ((1, "by_precision"), (2, "by_batch_size")):
        for g in d[key]:
            fig.add_trace(go.Box(y=g["values"], name=g["key"], boxpoints="all", jitter=0.4, pointpos=0,
                                 text=[f"trial {n}" for n in g["numbers"]], showlegend=False,
                                 marker={"color": COLORS["pareto"]}), 1, col)
    fig.update_yaxes(title_text="samples/s", row=1, col=1)
    fig.update_layout(title="Training throughput of finished trials", height=420, template="plotly_white")
    return fig


def figures(data: dict[str, Any]) -> dict[str, Any]:
    """The report's figures from `build`'s data; a figure with nothing to show is None."""
    return {"pareto": pareto_figure_from(data["pareto"]), "history": history_figure(data["history"]),
            "curves": curves_figure(data["curves"]), "importances": importances_figure(data["importances"]),
            "parallel": parallel_figure(data["parallel"]), "throughput": throughput_figure(data["throughput"])}


# ---------------------------------------------------------------- HTML


_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1300px; color: #222; }
h1 { margin-bottom: 4px; } h2 { margin-top: 32px; border-bottom: 1px solid #ddd; }
.meta { color: #555; } table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 3px 7px; text-align: right; vertical-align: top; }
th { background: #f4f4f4; } td.params { text-align: left; font-family: monospace; }
tr.rec { background: #fde8e8; } .note { color: #8a6d3b; background: #fcf8e3; padding: 6px 10px; }
"""


def _table(top: list[dict[str, Any]], metrics: list[str]) -> str:
    cols = shown_with(metrics)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["trial", "", *cols, "precision", "settings"])
    rows = []
    for r in top:
        mark = "recommended" if r["recommended"] else "Pareto" if r["pareto"] else ""
        if not r["feasible"]:
            mark += " infeasible"
        vals = "".join(f"<td>{fmt_metric(c, r['metrics'].get(c, r['values'].get(c)))}</td>" for c in cols)
        params = html.escape(" ".join(f"{k}={_fmt(v)}" for k, v in r["params"].items()))
        rows.append(f"<tr class=\"{'rec' if r['recommended'] else ''}\"><td>{r['number']}</td><td>{mark}</td>"
                    f"{vals}<td>{html.escape(str(r['precision']))}</td><td class=\"params\">{params}</td></tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def render(data: dict[str, Any]) -> str:
    """The whole report as one HTML string, plotly.js inline."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    s = data["summary"]
    figs = figures(data)
    metrics = [o["metric"] for o in s["objectives"]]

    def fig_html(name: str) -> str:
        fig = figs[name]
        if fig is None:
            return "<p class=\"note\">not enough complete trials to draw this yet</p>"
        return pio.to_html(fig, full_html=False, include_plotlyjs=False, config={"responsive": True},
                           div_id=f"fig-{name}")

    esc = html.escape
    states = ", ".join(f"{n} {k.lower()}" for k, n in sorted(s["states"].items()))
    reasons = ", ".join(f"{k} {n}" for k, n in sorted(s["stop_reasons"].items())) or "none"
    versions = ", ".join(f"{k} {v}" for k, v in s["versions"].items())
    objectives = ", ".join(f"{o['metric']} ({o['direction']})" for o in s["objectives"])
    rec = s["recommended"]
    if rec is not None:
        left_out = ", ".join(sorted(rec.get("not_applied") or ()))  # searched, but the trial did not apply them
        rec_html = (f"<p><b>Recommended: trial {rec['number']}</b> (select: {esc(s['select'])}): "
                    + esc(", ".join(f"{k} {fmt_metric(k, v)}" for k, v in rec["metrics"].items()
                                    if k in shown_with(metrics)))
                    + "<br><code>" + esc(" ".join(f"{k}={_fmt(v)}" for k, v in rec["params"].items()))
                    + "</code>" + (f"<br>searched but not applied (left out): {esc(left_out)}" if left_out else "")
                    + "</p>")
    else:
        rec_html = "<p class=\"note\">no complete trial yet: nothing to recommend</p>"
    imp_notes = "".join(f"<p class=\"note\">{esc(o['metric'])}: {esc(o['error'])}</p>"
                        for o in data["importances"]["objectives"] if o["error"])
    sections = [
        ("Pareto front", "Each point is a trial; pruned trials are drawn where they stopped. The star is the "
                         "recommended trade-off.", fig_html("pareto")),
        ("Optimization history", "", fig_html("history")),
        ("Learning curves", "Per-epoch records of every trial that ran an epoch.", fig_html("curves")),
        ("Parameter importances", "", imp_notes + fig_html("importances")),
        ("Parallel coordinates", "Searched settings shared by all complete trials, and the objectives.",
         fig_html("parallel")),
        ("Throughput", "Samples per second while training, by precision mode and by batch size.",
         fig_html("throughput")),
        ("Top trials", "", _table(data["top"], metrics)),
    ]
    body = "".join(f"<h2>{esc(t)}</h2>" + (f"<p class=\"meta\">{esc(d)}</p>" if d else "") + h for t, d, h in sections)
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>autotune report: {esc(s['study'])}</title>"
            f"<style>{_CSS}</style><script type=\"text/javascript\">{get_plotlyjs()}</script></head><body>"
            f"<h1>autotune report: {esc(s['study'])}</h1>"
            f"<p class=\"meta\">{s['n_trials']} trials ({esc(states)}); stop reasons: {esc(reasons)}<br>"
            f"objectives: {esc(objectives)}; sampler {esc(s['sampler'])}; device {esc(str(s['device']))}<br>"
            f"config {esc(str(s['source']))}; {esc(versions)}</p>{rec_html}{body}</body></html>")


def write(study: optuna.Study, cfg: RunConfig, path: str | Path) -> Path:
    """Write the report to `path` (atomically: a failed run leaves no half-written file)."""
    path = Path(path)
    text = render(build(study, cfg))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
