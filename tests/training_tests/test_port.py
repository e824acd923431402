"""The trial context's port (training/context/port.py), driven as a framework's callbacks drive it: the checks a
step gets are ctx.backward's, whoever owns the loop."""

from __future__ import annotations

import pytest
import torch

from autotune.core import TrialStopped
from autotune.spec.settings import DEFAULTS
from autotune.training import Limits, TrialContext, TrialPort, TrialSetup
from autotune.training.context.epoch_clock import FINITE_CHECK_EVERY


def _port(limits: Limits) -> TrialPort:
    ctx = TrialContext({**DEFAULTS, "device": "cpu", "epochs": 2}, setup=TrialSetup(limits=limits))
    return TrialPort(ctx, "a framework")


@pytest.mark.parametrize("loss", [None, torch.tensor(0.5)], ids=["framework logs its loss", "loss per step"])
def test_a_frameworks_steps_stop_at_the_memory_cap_inside_the_epoch(loss: torch.Tensor | None) -> None:
    """The HF Trainer's steps carry no loss (it logs the epoch's): the periodic check still reads the memory cap, as
    it does for ctx.backward, so a trial over the cap stops mid-epoch, not after its evaluation."""
    port = _port(Limits(max_peak_memory_mb=100))  # MB over what the process held when the trial began
    port.start(steps_per_epoch=4 * FINITE_CHECK_EVERY)
    assert port.epoch_begin()
    held = torch.ones(300 * 2**18)  # 300 MB, written: resident
    with pytest.raises(TrialStopped) as e:
        for _ in range(FINITE_CHECK_EVERY):
            port.batch_begin()
            port.step(8, loss)
    assert e.value.reason == "memory" and e.value.epoch == 1, e.value
    assert port.ctx._state.clock.steps == FINITE_CHECK_EVERY  # at the first periodic check
    del held


def test_a_non_finite_step_loss_stops_a_frameworks_epoch() -> None:
    port = _port(Limits())
    port.start(steps_per_epoch=4 * FINITE_CHECK_EVERY)
    assert port.epoch_begin()
    with pytest.raises(TrialStopped) as e:
        for i in range(2 * FINITE_CHECK_EVERY):
            port.step(8, torch.tensor(float("nan") if i == 3 else 0.5))
    assert e.value.reason == "diverged" and port.ctx._state.clock.steps == FINITE_CHECK_EVERY, e.value
