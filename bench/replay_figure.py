"""The replay's anytime hypervolume curves as one Plotly figure for the documentation.

    python bench/replay_figure.py CURVES.json [CURVES.json ...] --out docs/figures/replay-anytime.html

Each CURVES.json is `bench/replay.py --curves`'s file: per worker count and arm, the share of the fixed reference
hypervolume (linear time) the arm's front holds at each share of the budget, median and quartiles over tasks x
seeds. One panel per file and worker count; a line per arm (its median) and a band (its quartiles). The page loads
plotly.js from a copy beside it (`plotly.min.js`, the one the plotly package ships), never from a network: the
documentation, like autotune's reports, reads offline.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"]


def panels(files: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], list[float]]]:
    """(title, {arm: curve}, grid) per workload file and worker count, in order."""
    out = []
    for f in files:
        by: dict[int, dict[str, Any]] = {}
        for key, c in f["curves"].items():
            n, arm = key.split("|", 1)
            by.setdefault(int(n), {})[arm] = c
        seeds = f["seeds"]
        n_tasks = len(f["tasks"])
        what = f["workload"] + (f" ({n_tasks} tasks)" if f["tasks"] != [None] else "")
        for n in sorted(by):
            out.append((f"{what}, {n} worker{'s' if n > 1 else ''}, seeds {seeds[0]}-{seeds[-1]}", by[n], f["grid"]))
    return out


def figure(files: list[dict[str, Any]]) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ps = panels(files)
    cols = 2 if len(ps) > 1 else 1
    rows = (len(ps) + cols - 1) // cols
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[p[0] for p in ps], shared_yaxes=True)
    arms = list(dict.fromkeys(a for _, by, _ in ps for a in by))
    for i, (_, by, grid) in enumerate(ps):
        r, c = i // cols + 1, i % cols + 1
        for arm, curve in by.items():
            color = COLORS[arms.index(arm) % len(COLORS)]
            fig.add_trace(go.Scatter(x=grid + grid[::-1], y=curve["q75"] + curve["q25"][::-1], fill="toself",
                                     fillcolor=color, opacity=0.15, line={"width": 0}, hoverinfo="skip",
                                     showlegend=False, legendgroup=arm), row=r, col=c)
            fig.add_trace(go.Scatter(x=grid, y=curve["median"], name=arm, line={"color": color}, legendgroup=arm,
                                     showlegend=i == 0), row=r, col=c)
        fig.update_xaxes(title_text="share of the budget (simulated time)", row=r, col=c)
        fig.update_yaxes(title_text="hypervolume / reference", range=[0, 1.02], row=r, col=c)
    fig.update_layout(height=380 * rows, title="Anytime hypervolume on the replay: median and quartiles over tasks x "
                                               "seeds (bench/replay.py --curves)")
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("curves", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, default=Path("docs/figures/replay-anytime.html"))
    args = ap.parse_args()
    fig = figure([json.loads(p.read_text()) for p in args.curves])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(args.out, include_plotlyjs="directory", full_html=True)  # plotly.min.js beside it, offline
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
