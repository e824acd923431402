"""`TuneResult` as users get it (`autotune.run`, `autotune.TuneResult`): the study layer's result plus
`report(path)`, the HTML report, which is observe's (the study layer does not import observe)."""

from __future__ import annotations

from pathlib import Path

from autotune.study import runner as study_mod


class TuneResult(study_mod.TuneResult):
    def report(self, path: str | Path) -> Path:
        """Write the study's self-contained HTML report (Plotly, opens offline) to `path`; returns it."""
        from autotune.observe import report

        return report.write(self.study, self.config, Path(path))

    @classmethod
    def of(cls, result: study_mod.TuneResult) -> TuneResult:
        return cls(study=result.study, config=result.config)
