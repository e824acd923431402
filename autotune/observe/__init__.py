"""Looking at a study: progress and the recommendation printed, the HTML report and its figures, the dashboard,
tracking (MLflow), `best --export`, `autotune profile` and `autotune doctor`. Reads studies, never runs one."""

from __future__ import annotations

from autotune.observe.dashboard import serve
from autotune.observe.export import export_best
from autotune.observe.profiling import profile, read_params
from autotune.observe.progress import RunView, print_best, print_pareto
from autotune.observe.report import build, pareto_figure, write
from autotune.observe.result import TuneResult
from autotune.observe.tracking import Tracker, callbacks, describe

__all__ = [
    "RunView", "Tracker", "TuneResult", "build", "callbacks", "describe", "export_best", "pareto_figure",
    "print_best", "print_pareto", "profile", "read_params", "serve", "write",
]
