"""The judge stage: a trained trial's values. Every objective must be reported (a fit that never reports one fails
with ContextMisuse, a repeated error like any other), and be finite (else the trial stops `diverged`: an objective
never returns NaN); a fit that returned its objectives only at the end is told its pruning was off. Then
`constraints:` as Optuna's (`trial.set_constraint`: feasible when every value is <= 0; samplers read them, the front
leaves the others out)."""

from __future__ import annotations

import math

from autotune.core import ConfigError, code_where, suggest
from autotune.fit import trainer
from autotune.spec import RunConfig, TrialRecord, is_quality
from autotune.study import outcome
from autotune.study.epoch_rules import StudyRules
from autotune.study.records import BufferedTrial
from autotune.training import ContextMisuse, TrainResult


class Judge:
    """One run's judge of its trials' results (`metrics`: the objectives', in order)."""

    def __init__(self, cfg: RunConfig, fit: trainer.Fit | None, metrics: list[str], rules: StudyRules,
                 failures: outcome.Failures) -> None:
        self.cfg, self.fit, self.metrics, self.rules, self.failures = cfg, fit, metrics, rules, failures
        self.judged = False  # a trial of this run reported every objective

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
        if missing and not self.judged:
            self.misspelt(record, result, missing, reported)
        if missing:
            self.failures.fail(record, ContextMisuse(f"{name} never reported {', '.join(missing)} (an objective): "
                                                     f"ctx.report({missing[0]}=...) each epoch, or return "
                                                     f"{{{missing[0]!r}: ...}}", at=code_where(self.fit)),
                               result.epochs_run)
        self.failures.reset()  # (after the checks above: a fit that never reports fails the same way)
        self.judged = True
        if not reported:
            self.rules.returned_only(record, result)
        out = [float(metrics[m]) for m in self.metrics]
        bad = [m for m, v in zip(self.metrics, out) if not math.isfinite(v)]
        if bad:  # an objective never returns NaN (one fit returned at the end: per-epoch ones stopped there)
            outcome.stop(record, "diverged", result.epochs_run, f"non-finite {bad[0]} (an objective)")
        self.constrain(trial, result, metrics)
        return out

    def misspelt(self, record: TrialRecord, result: TrainResult, missing: list[str], reported: bool) -> None:
        """The run's first trial reported metrics but not an objective: every trial of the same code will do the
        same, so the run stops now (not after `limit` trials) with one line naming what the fit reported."""
        if not reported or not is_quality(missing[0]):  # (a clock or a model's measure: not a name)
            return
        names = sorted({k for r in result.history for k in r.metrics})
        i = next(i for i, o in enumerate(self.cfg.objectives) if o.metric == missing[0])
        text = (f"{self.failures.name} never reported {missing[0]} (an objective) in its {result.epochs_run} "
                f"epoch(s); it reported: {', '.join(names)}{suggest(missing[0], names)}")
        self.failures.record(record, text, result.epochs_run)
        raise ConfigError(self.cfg.file, f"objectives.{i}.metric", text)

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
