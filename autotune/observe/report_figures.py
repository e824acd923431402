"""The report's Plotly figures: drawing only, from the plain data of report_data.py (plotly imported when drawn)."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.observe.report_data import pareto_data
from autotune.spec import RunConfig, label

# Colour per point category / learning-curve group; stop reasons share the pruned hue family.
COLORS = {
    "recommended": "#d62728", "pareto": "#1f77b4", "complete": "#7fb3e0", "infeasible": "#9467bd",
    "pruned": "#ff7f0e", "failed": "#7f7f7f", "early_stopped": "#2ca02c",
    "dominated": "#ff7f0e", "diverged": "#8c564b", "slow": "#e377c2", "oom": "#bcbd22", "unsupported": "#17becf",
    "error": "#7f7f7f", "hang": "#e377c2", "timeout": "#c5b0d5", "interrupted": "#7f7f7f", "memory": "#dbdb8d",
}


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
