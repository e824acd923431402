"""The acceleration half of the search in seconds: the speed probe a study's trials pass (`Gate`, opened once per
trial as a `TrialProbe`: each throughput combination timed once, known failures and too-slow ones stopped before
they train), `study.strategy` (`StrategyPoints`: each trial's point), and `autotune speed`'s table of every
combination (`run`)."""

from __future__ import annotations

from autotune.speed.probe import THROUGHPUT, Gate, TrialProbe, code_fingerprint
from autotune.speed.strategy import StrategyPoints, make_shortlist
from autotune.speed.sweep import Row, measure, run, table

__all__ = ["Gate", "Row", "StrategyPoints", "THROUGHPUT", "TrialProbe", "code_fingerprint", "make_shortlist", "measure",
           "run", "table"]
