"""`TuneResult`, what `autotune.run` returns: a study and its config, read as trial summaries, the Pareto front,
the recommended trial, a table, and the HTML report. It lives here, above the study layer, because its report is
observe's; the study layer returns the `optuna.Study` it ran (`autotune.study.run`, `run_parallel`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from autotune.search import results
from autotune.spec import RunConfig


@dataclass
class TuneResult:
    study: optuna.Study
    config: RunConfig

    @property
    def metrics(self) -> list[str]:
        return [o.metric for o in self.config.objectives]

    def trials(self) -> list[results.TrialSummary]:
        return [results.summarize(t, self.metrics) for t in self.study.get_trials(deepcopy=False)]

    @property
    def pareto(self) -> list[results.TrialSummary]:
        front = results.pareto_front(self.study.get_trials(deepcopy=False), self.config.directions)
        if not self.config.multi_objective:
            best = results.select(front, self.config)
            front = [best] if best is not None else []
        return [results.summarize(t, self.metrics) for t in front]

    @property
    def best(self) -> results.TrialSummary | None:
        return results.best_summary(self.study, self.config)

    def to_dataframe(self) -> Any:
        """A pandas DataFrame if pandas is installed, else a list of row dicts."""
        rows = [s.row() for s in self.trials()]
        try:
            import pandas as pd
        except ImportError:
            return rows
        return pd.DataFrame(rows)

    def report(self, path: str | Path) -> Path:
        """Write the study's self-contained HTML report (Plotly, opens offline) to `path`; returns it."""
        from autotune.observe import report

        return report.write(self.study, self.config, Path(path))


__all__ = ["TuneResult"]
