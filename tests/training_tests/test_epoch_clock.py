"""An epoch's clocks and counters, without a model: samples, losses, input wait, compile time, steady rate."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import torch

from autotune.core.errors import TrialStopped
from autotune.spec import Settings
from autotune.training.context.applied import Applied
from autotune.training.context.collective import Alone
from autotune.training.context.epoch_clock import FINITE_CHECK_EVERY, EpochClock, steady_rate, wait_fraction
from autotune.training.context.results import EpochRecord
from autotune.training.context.stepper import Stepper

CPU = torch.device("cpu")


def clock(**settings: Any) -> EpochClock:
    return EpochClock(CPU, Settings({"time_excludes_compile": False, **settings}), Alone())


def test_steps_of_loader_batches_count_each_batch_once() -> None:
    c = clock()
    c.open(1)
    batch = (torch.zeros(8, 3), torch.zeros(8))
    c.took(batch, 0.01, last=False)
    c.stepped(torch.tensor(2.0), 8)
    c.stepped(torch.tensor(4.0), 8)  # a second micro-step on the same batch: its samples are counted once
    c.took(batch, 0.01, last=True)
    c.stepped(torch.tensor(3.0), 8)
    assert (c.samples, c.fetched, c.steps, c.loss_n) == (16, 16, 3, 24) and c.last_batch
    rec = c.record({"val_loss": 1.0}, 2.0, lr=0.1)
    assert rec.train_loss == pytest.approx(3.0) and rec.samples_per_s == pytest.approx(8.0)
    assert rec.data_wait_fraction == pytest.approx(0.01) and rec.metrics == {"val_loss": 1.0}


def test_steps_of_its_own_batches_count_the_samples_given() -> None:
    c = clock()
    c.open(1)
    for _ in range(3):
        c.stepped(torch.tensor(1.0), 5)
    assert c.samples == 15 and not c.fed
    rec = c.record({"train_loss": 0.25}, 1.0, lr=math.nan)
    assert rec.train_loss == 0.25 and "train_loss" not in rec.metrics  # a reported train_loss wins


def test_a_new_epoch_resets_the_counters_and_the_clock() -> None:
    c = clock()
    c.open(1)
    c.took((torch.zeros(4),), 0.5, last=False)
    c.stepped(torch.tensor(1.0), 4)
    c.open(2)
    assert (c.epoch, c.samples, c.fetched, c.steps, c.wait_s, c.loss_sum, c.running) == (2, 0, 0, 0, 0.0, None, True)
    assert clock().running is False  # before ctx.epochs


def test_the_finite_check_is_due_every_few_steps() -> None:
    c = clock()
    c.open(1)
    due = [c.stepped(torch.tensor(1.0), 1) for _ in range(FINITE_CHECK_EVERY)]
    assert due[-1] and not any(due[:-1]) and c.finite()
    c.stepped(torch.tensor(math.inf), 1)
    assert not c.finite()


def test_the_epoch_ends_at_its_last_step_not_at_the_report() -> None:
    c = clock()
    c.open(1)
    time.sleep(0.02)
    c.stepped(torch.tensor(1.0), 1)
    time.sleep(0.05)  # evaluation: not training
    seconds, stop = c.end(final=False)
    assert stop is None and 0.015 < seconds < 0.05 and c.train_time_s == seconds


def test_the_first_steps_compile_is_measured_apart() -> None:
    c = clock(time_excludes_compile=True)
    c.compiled = True
    c.open(1)
    time.sleep(0.05)  # the first step compiles
    c.stepped(torch.tensor(1.0), 1)
    for _ in range(3):
        c.stepped(torch.tensor(1.0), 1)
    seconds, _ = c.end(final=False)
    assert c.compile_time_s > 0.04 and seconds < 0.02  # the compile left out of the epoch


class StoppingProbe:
    done = False

    def epoch_start(self, dev: torch.device, t: float) -> None:
        pass

    def epoch_end(self, t: float) -> None:
        raise TrialStopped("slow", 1, "too slow for the probe")

    def after_step(self, *args: Any) -> None:
        raise TrialStopped("slow", 1, "too slow for the probe")


def test_probe_verdicts_are_returned_and_spare_a_finished_run() -> None:
    c = EpochClock(CPU, Settings({"time_excludes_compile": False}), Alone(), probe=StoppingProbe())  # type: ignore[arg-type]
    c.open(1)
    assert c.probe_step(4).reason == "slow"
    seconds, stop = c.end(final=False)
    assert stop is not None and seconds == 0.0 and c.train_time_s == 0.0
    assert c.end(final=True)[1] is None


def test_timed_counts_input_wait_and_flushes_the_trailing_accumulation() -> None:
    c = clock()
    c.open(1)
    stepper = Stepper(Settings({"grad_clip": 0.0, "lr_schedule": "constant"}), Applied(), None, 2)
    batches = [(torch.zeros(3, 2),), (torch.zeros(3, 2),)]
    assert [len(b[0]) for b in c.timed(batches, stepper, math.inf, lambda: AssertionError())] == [3, 3]
    assert c.fetched == 6 and c.last_batch and c.train_end is not None


def test_timed_raises_the_hang_before_any_step() -> None:
    c = clock()
    c.open(1)
    stepper = Stepper(Settings(), Applied(), None, 1)
    with pytest.raises(TrialStopped, match="hung"):
        next(c.timed([(torch.zeros(1),)], stepper, 0.0, lambda: TrialStopped("slow", 0, "hung")))


def record(epoch: int, seconds: float, rate: float, wait: float) -> EpochRecord:
    return EpochRecord(epoch=epoch, train_loss=1.0, epoch_time_s=seconds, train_time_s=0.0, samples_per_s=rate,
                       data_wait_fraction=wait, lr=0.1)


def test_steady_rate_leaves_out_the_first_epoch_when_there_are_others() -> None:
    history = [record(1, 10.0, 1.0, 0.5), record(2, 1.0, 100.0, 0.0), record(3, 3.0, 200.0, 0.0)]
    assert steady_rate(history) == pytest.approx((100 + 600) / 4)
    assert steady_rate(history[:1]) == 1.0
    assert wait_fraction(history) == pytest.approx(5.0 / 14.0)
    assert steady_rate([record(1, 0.0, 5.0, 0.0)]) == 0.0
