"""The admit stage: what stops a trial before it trains (at epoch 0, PRUNED). Its precision does not run on its
device (`unsupported`); the probe_then_tune strategy dropped its combination (`slow`); the speed probe knows its
combination fails here (`unsupported`, with that error: the same error `max_repeated_errors` times in a row stops
the run, as failures would) or projects it too slow (`slow`, `dominated`)."""

from __future__ import annotations

from autotune.core import TrialStopped
from autotune.fit import TrialPlan
from autotune.speed import TrialProbe, strategy
from autotune.study import outcome
from autotune.study.records import BufferedTrial
from autotune.training import accel


def admit(trial: BufferedTrial, plan: TrialPlan, points: strategy.StrategyPoints, probe: TrialProbe,
          failures: outcome.Failures) -> None:
    """Stop the trial now (optuna.TrialPruned) if it cannot or need not train; else return. `probe`: the trial's
    speed probe, opened by the objective (the train stage times its first steps with the same one)."""
    record = trial.record
    precision = plan.settings.precision
    why = accel.precision_error(str(plan.device), precision)
    if why is not None:
        outcome.stop(record, "unsupported", 0, f"precision {precision} on {plan.device}: {why}")
    try:
        points.check(plan)  # probe_then_tune dropped this combination
        probe.check()  # known to fail here, or too slow: stopped before it trains
    except TrialStopped as e:
        known = probe.known_error() if e.reason == "unsupported" else None
        if known is not None:
            failures.known(record, known)
        outcome.stop(record, e.reason, e.epoch, e.detail)


__all__ = ["admit"]
