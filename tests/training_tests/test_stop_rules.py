"""Stop rules as decisions: each returns a TrialStopped or None, and raises nothing itself."""

from __future__ import annotations

import math
import time

from autotune.core import contention
from autotune.core.contention import Share
from autotune.core.errors import TrialStopped
from autotune.spec import Settings
from autotune.training.context.collective import Alone
from autotune.training.context.limits import Limits
from autotune.training.context.results import EpochRecord
from autotune.training.context.stop_rules import StopRules

SETTINGS = Settings({"early_stopping_patience": 2, "early_stopping_min_delta": 0.0})


def rec(epoch: int, train_loss: float = 1.0, train_time_s: float = 1.0, **metrics: float) -> EpochRecord:
    return EpochRecord(epoch=epoch, train_loss=train_loss, epoch_time_s=1.0, train_time_s=train_time_s,
                       samples_per_s=1.0, data_wait_fraction=0.0, lr=0.1, metrics=dict(metrics))


def test_a_healthy_epoch_goes_on_and_the_record_goes_out_first() -> None:
    seen: list[int] = []
    rules = StopRules(SETTINGS, Limits(loss_factor=4.0), on_record=lambda r: seen.append(r.epoch))
    r = rec(1, val_loss=0.5)
    assert rules.decide(r, [r], True, 5, math.inf) is None
    assert seen == [1] and rules.stopped_early_at is None


def test_divergence_is_returned_not_raised() -> None:
    rules = StopRules(SETTINGS, Limits(loss_factor=2.0))
    history = [rec(1, 1.0), rec(2, 3.0)]
    stop = rules.decide(history[-1], history, True, 5, math.inf)
    assert isinstance(stop, TrialStopped) and stop.reason == "diverged" and stop.epoch == 2


def test_a_non_finite_loss_stops_even_the_last_epoch_but_slow_does_not() -> None:
    rules = StopRules(SETTINGS, Limits(max_trial_seconds=1.0))
    last = rec(3, train_time_s=100.0)
    assert rules.decide(last, [last], True, 3, math.inf) is None  # finished training is kept
    nan = rec(3, math.nan)
    stop = rules.decide(nan, [nan], True, 3, math.inf)
    assert stop is not None and "non-finite" in stop.detail
    assert rules.check(rec(1, 1.0, val_loss=math.inf), [], False, 3, math.inf).detail == "non-finite val_loss"


def test_slow_projection_stops_before_the_last_epoch() -> None:
    rules = StopRules(SETTINGS, Limits(max_trial_seconds=10.0))
    r = rec(1, train_time_s=5.0)  # 5 s per epoch x 4 epochs > 10 s
    stop = rules.decide(r, [r], True, 4, math.inf)
    assert stop is not None and stop.reason == "slow"


def test_the_study_callback_may_stop_and_is_caught() -> None:
    def prune(r: EpochRecord) -> None:
        raise TrialStopped("pruned", r.epoch, "by the pruner")

    rules = StopRules(SETTINGS, Limits(), on_epoch=prune)
    stop = rules.decide(rec(1), [rec(1)], True, 5, math.inf)
    assert stop is not None and stop.reason == "pruned"


def test_early_stopping_counts_epochs_without_improvement() -> None:
    rules = StopRules(SETTINGS, Limits())
    history = []
    for epoch, v in enumerate([1.0, 0.9, 0.95, 0.92], start=1):
        history.append(rec(epoch, val_loss=v))
        assert rules.decide(history[-1], history, True, 10, math.inf) is None
    assert rules.stopped_early_at == 4  # two epochs after the best (0.9)


def test_early_stopping_watches_the_first_reported_candidate_and_its_direction() -> None:
    rules = StopRules(SETTINGS, Limits(), early_stopping_on=[("val_f1", "maximize"), ("val_loss", "minimize")])
    for epoch, f1 in enumerate([0.5, 0.6, 0.7], start=1):
        rules.early_stopping({"val_f1": f1, "val_loss": 9.0 + epoch}, epoch, 10)
    assert rules.stopped_early_at is None and rules.since_best == 0


def test_in_epoch_checks_and_the_hang_limit() -> None:
    rules = StopRules(SETTINGS, Limits(hang_seconds=0.0))
    time.sleep(0.001)
    assert rules.late()
    assert rules.in_epoch(True, True, 2).reason == "diverged"
    hung = rules.in_epoch(False, True, 2)
    assert hung is not None and hung.reason == "hang" and hung.epoch == 1
    assert rules.in_epoch(False, False, 2) is None
    assert StopRules(SETTINGS, Limits()).deadline == math.inf
    # in one process the periodic check sees only the loss: the hang is checked at each step instead
    assert rules.periodic(True, Alone(), 2) is None
    assert rules.periodic(False, Alone(), 2).detail == "non-finite training loss"


def test_verdict_in_one_process_is_rank_0s_decision() -> None:
    rules = StopRules(SETTINGS, Limits(loss_factor=2.0))
    history = [rec(1, 1.0), rec(2, 5.0)]
    stop = rules.verdict(history[-1], history, True, 5, math.inf, Alone())
    assert stop is not None and stop.reason == "diverged"


def test_a_slow_projection_from_epochs_that_waited_for_cores_does_not_stop() -> None:
    """The epochs ran while busy processes held the cores: their time is the machine's, so the projection is looked
    at again next epoch instead of stopping the trial; with the cores its own, the stop says so."""
    from tests.support import busy, spin_share

    slow = rec(1, train_time_s=5.0)  # 5 s per epoch x 4 epochs > 10 s
    with busy(seconds=10, n=2 * contention.cores()):
        rules = StopRules(SETTINGS, Limits(max_trial_seconds=10.0))  # its window: the trial so far
        spin_share(seconds=1.0, threads=2)  # the trial's epochs, on cores others hold
        assert rules.decide(slow, [slow], True, 4, math.inf) is None
    assert rules.slow_deferred == [1]
    quiet = StopRules(SETTINGS, Limits(max_trial_seconds=10.0), cpu=lambda: Share(1.0, 1.0, 0.02, 0.02))
    stop = quiet.decide(slow, [slow], True, 4, math.inf)
    assert stop is not None and stop.reason == "slow" and quiet.slow_deferred == []
    assert stop.detail == "projected 20.0s > max_trial_seconds 10 (its epochs had their cores: waited 2%)"
    hopeless = StopRules(SETTINGS, Limits(max_trial_seconds=0.1), cpu=lambda: Share(1.0, 0.5, 0.5, 0.5))
    stop = hopeless.decide(slow, [slow], True, 4, math.inf)  # 200x its limit: more than waiting for cores explains
    assert stop is not None and stop.reason == "slow" and "200x the limit is more than that explains" in stop.detail
