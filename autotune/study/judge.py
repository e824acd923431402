"""The judge stage: a trained trial's values. Every objective must be reported (a fit that never reports one fails
with ContextMisuse, a repeated error like any other), and be finite (else the trial stops `diverged`: an objective
never returns NaN); a fit that returned its objectives only at the end is told its pruning was off. Then
`constraints:` as Optuna's (`trial.set_constraint`: feasible when every value is <= 0; samplers read them, the front
leaves the others out)."""

from __future__ import annotations

import math

from autotune.core import code_where
from autotune.fit import trainer
from autotune.spec import RunConfig
from autotune.study import outcome
from autotune.study.epoch_rules import StudyRules
from autotune.study.records import BufferedTrial
from autotune.training import ContextMisuse, TrainResult


class Judge:
    """One run's judge of its trials' results (`metrics`: the objectives', in order)."""

    def __init__(self, cfg: RunConfig, fit: trainer.Fit | None, metrics: list[str], rules: StudyRules,
                 failures: outcome.Failures) -> None:
        self.cfg, self.fit, self.metrics, self.rules, self.failures = cfg, fit, metrics, rules, failures

    def values(self, trial: BufferedTrial, result: TrainResult) -> list[float]:
        """The objectives' values (raises to stop or fail the trial instead), its constraints set."""
        record, name = trial.record, self.failures.name
        metrics = result.metrics()
        missing = [m for m in self.metrics if m not in metrics]
        reported = any(r.metrics for r in result.history)
        if missing and not reported:
            self.failures.fail(record, ContextMisuse(
                f"{name} never called ctx.report(...) with a metric in its {result.epochs_run} epoch(s) and "
                f"returned no {', '.join(missing)}: report the objectives ({', '.join(missing)}) once per epoch, "
                f"inside `for epoch in ctx.epochs()`: ctx.report({missing[0]}=...)", at=code_where(self.fit)),
                result.epochs_run)
        if missing:
            self.failures.fail(record, ContextMisuse(f"{name} never reported {', '.join(missing)} (an objective): "
                                                     f"ctx.report({missing[0]}=...) each epoch, or return "
                                                     f"{{{missing[0]!r}: ...}}", at=code_where(self.fit)),
                               result.epochs_run)
        self.failures.reset()  # (after the checks above: a fit that never reports fails the same way)
        if not reported:
            self.rules.returned_only(record, result)
        out = [float(metrics[m]) for m in self.metrics]
        bad = [m for m, v in zip(self.metrics, out) if not math.isfinite(v)]
        if bad:  # an objective never returns NaN (one fit returned at the end: per-epoch ones stopped there)
            outcome.stop(record, "diverged", result.epochs_run, f"non-finite {bad[0]} (an objective)")
        self.constrain(trial, result, metrics)
        return out

    def constrain(self, trial: BufferedTrial, result: TrainResult, metrics: dict[str, float]) -> None:
        """`constraints:` as Optuna's (feasible when <= 0)."""
        c = self.cfg.constraints
        if c.max_accuracy_drop is not None and "val_accuracy_before_compress" in result.extra:
            drop = result.extra["val_accuracy_before_compress"] - result.val_accuracy
            trial.set_constraint("accuracy_drop", drop - c.max_accuracy_drop)
        for metric, cap in c.caps().items():  # (validation made sure each is measured where the study runs)
            if metric in metrics:
                trial.set_constraint(metric, float(metrics[metric]) - cap)


__all__ = ["Judge"]
