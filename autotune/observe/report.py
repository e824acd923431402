"""A study as pictures: plain data first (pure functions, tested), then Plotly figures, then one HTML file.

Every `*_data` function takes an optuna Study and the RunConfig and returns dicts and lists of plain
Python values; the `*_figure` functions only draw what those return. `write` puts all figures into one
self-contained HTML file with plotly.js inline, so it opens offline and can be mailed around.

The parts: report_data.py (the data), report_figures.py (the figures), report_html.py (the page); this module
writes the file and re-exports their names.
"""

from __future__ import annotations

import os
from pathlib import Path

import optuna

from autotune.observe.report_data import (
    axes,
    build,
    history_data,
    importances,
    learning_curves,
    measured,
    parallel_data,
    pareto_data,
    stop_group,
    summary_data,
    throughput_data,
    top_trials,
)
from autotune.observe.report_figures import (
    COLORS,
    curves_figure,
    figures,
    history_figure,
    importances_figure,
    parallel_figure,
    pareto_figure,
    pareto_figure_from,
    throughput_figure,
)
from autotune.observe.report_html import render
from autotune.spec import RunConfig

__all__ = ["COLORS", "axes", "build", "curves_figure", "figures", "history_data", "history_figure", "importances",
           "importances_figure", "learning_curves", "measured", "parallel_data", "parallel_figure", "pareto_data",
           "pareto_figure", "pareto_figure_from", "render", "stop_group", "summary_data", "throughput_data",
           "throughput_figure", "top_trials", "write"]


def write(study: optuna.Study, cfg: RunConfig, path: str | Path) -> Path:
    """Write the report to `path` (atomically: a failed run leaves no half-written file)."""
    path = Path(path)
    text = render(build(study, cfg))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
