"""The report as one self-contained HTML page: the summary, the figures (plotly.js inline, so it opens offline
and can be mailed around) and the top trials' table."""

from __future__ import annotations

import html
from typing import Any

from autotune.observe.report_figures import _fmt, figures
from autotune.spec import fmt as fmt_metric
from autotune.spec import shown_with

_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1300px; color: #222; }
h1 { margin-bottom: 4px; } h2 { margin-top: 32px; border-bottom: 1px solid #ddd; }
.meta { color: #555; } table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 3px 7px; text-align: right; vertical-align: top; }
th { background: #f4f4f4; } td.params { text-align: left; font-family: monospace; }
tr.rec { background: #fde8e8; } .note { color: #8a6d3b; background: #fcf8e3; padding: 6px 10px; }
"""


def _table(top: list[dict[str, Any]], metrics: list[str]) -> str:
    # (a shown metric nothing measured, energy without a counter, gets no column of dashes)
    cols = [c for c in shown_with(metrics) if c in metrics or any(c in r["metrics"] for r in top)]
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
