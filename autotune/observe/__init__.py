"""Looking at a study: progress and the recommendation printed, the HTML report and its figures, the dashboard,
tracking (MLflow), `best --export`, `autotune profile` and `autotune doctor`. Reads studies, never runs one.

The names below are imported on first use (core/_lazy.py): importing one module of this package never
imports the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core._lazy import exports

if TYPE_CHECKING:
    from autotune.observe._dashboard import serve
    from autotune.observe._export import export_best
    from autotune.observe._profiling import profile, read_params
    from autotune.observe._progress import RunView, print_best, print_pareto
    from autotune.observe._report import build, pareto_figure, write
    from autotune.observe._result import TuneResult
    from autotune.observe._tracking import Tracker, callbacks, describe

_NAMES = {
    "export_best": "_export",
    "profile": "_profiling",
    "read_params": "_profiling",
    "build": "_report",
    "pareto_figure": "_report",
    "write": "_report",
    "RunView": "_progress",
    "print_best": "_progress",
    "print_pareto": "_progress",
    "Tracker": "_tracking",
    "describe": "_tracking",
    "callbacks": "_tracking",
    "TuneResult": "_result",
    "serve": "_dashboard",
}
__getattr__ = exports(__name__, _NAMES)
__all__ = ["RunView", "Tracker", "TuneResult", "build", "callbacks", "describe", "export_best", "pareto_figure",
           "print_best", "print_pareto", "profile", "read_params", "serve", "write"]
