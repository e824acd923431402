"""The acceleration half of the search in seconds: the speed probe a study's trials pass (`Gate`: each throughput
combination timed once, known failures and too-slow ones stopped before they train), `study.strategy`
(`Search`), and `autotune speed`'s table of every combination (`run`).

The names below are imported on first use (core/_lazy.py): importing one module of this package never
imports the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core._lazy import exports

if TYPE_CHECKING:
    from autotune.speed._probe import THROUGHPUT, Gate, code_fingerprint
    from autotune.speed._speed import Row, measure, run, table
    from autotune.speed._strategy import Search, make_plan

_NAMES = {
    "THROUGHPUT": "_probe",
    "Gate": "_probe",
    "code_fingerprint": "_probe",
    "Search": "_strategy",
    "make_plan": "_strategy",
    "Row": "_speed",
    "measure": "_speed",
    "run": "_speed",
    "table": "_speed",
}
__getattr__ = exports(__name__, _NAMES)
__all__ = ["Gate", "Row", "Search", "THROUGHPUT", "code_fingerprint", "make_plan", "measure", "run", "table"]
