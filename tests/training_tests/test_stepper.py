"""The optimizer steps of ctx.backward, without the context: accumulation, clipping, schedules, lr overwrites."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from autotune.spec import Settings
from autotune.training.context.applied import Applied
from autotune.training.context.misuse import ContextMisuse
from autotune.training.context.stepper import Stepper, scale_lrs

SETTINGS = {"grad_clip": 0.0, "lr_schedule": "constant", "grad_accum_steps": 1, "epochs": 2}


def stepper(accum: int = 1, searched: tuple[str, ...] = (), **settings: Any) -> tuple[Stepper, nn.Linear]:
    model = nn.Linear(3, 1)
    s = Stepper(Settings({**SETTINGS, "grad_accum_steps": accum, **settings}), Applied(searched), None, accum)
    s.use(torch.optim.SGD(model.parameters(), lr=0.1), None)
    return s, model


def loss_of(model: nn.Linear) -> torch.Tensor:
    return model(torch.ones(4, 3)).pow(2).mean()


def test_the_optimizer_steps_every_accum_micro_batches_and_at_the_last_batch() -> None:
    s, model = stepper(accum=3)
    before = model.weight.detach().clone()
    s.backward(loss_of(model), last_batch=False)
    s.backward(loss_of(model), last_batch=False)
    assert torch.equal(model.weight, before) and s.micro == 2
    s.backward(loss_of(model), last_batch=True)  # the data ran out: step what accumulated
    assert not torch.equal(model.weight, before) and s.micro == 0
    assert s.stepped and s.applied.was_read("grad_accum_steps")


def test_flush_steps_a_trailing_partial_accumulation_once() -> None:
    s, model = stepper(accum=4)
    s.backward(loss_of(model), last_batch=False)
    assert s.flush() and s.micro == 0
    assert not s.flush()


def test_clipping_bounds_the_gradient_norm() -> None:
    s, model = stepper(grad_clip=1e-3)
    before = model.weight.detach().clone()
    (model(torch.ones(4, 3)) * 1e6).mean().backward()
    s.micro = 1
    s.step()
    assert (model.weight - before).norm() <= 0.1 * 1e-3 * 1.01  # lr x clipped norm


def test_a_schedule_needs_the_epoch_length() -> None:
    s, model = stepper(lr_schedule="cosine")
    with pytest.raises(ContextMisuse, match="needs the steps per epoch"):
        s.backward(loss_of(model), last_batch=False)
    s, model = stepper(lr_schedule="cosine")
    s.steps_per_epoch = 5
    s.backward(loss_of(model), last_batch=False)
    assert s.sched is not None and s.opt.param_groups[0]["lr"] < 0.1


def test_a_scheduler_of_the_fits_own_steps_the_lr_alone() -> None:
    s, model = stepper(lr_schedule="cosine")
    torch.optim.lr_scheduler.StepLR(s.opt, 1)
    s.backward(loss_of(model), last_batch=False)
    assert s.sched is None and s.own_scheduler


def test_a_searched_lr_scales_each_group_and_an_overwrite_is_noted_once() -> None:
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD([{"params": [model.weight], "lr": 0.1}, {"params": [model.bias], "lr": 1.0}])
    s = Stepper(Settings(SETTINGS), Applied(("lr",)), None, 1)
    s.use(opt, 2.0)
    assert [g["lr"] for g in opt.param_groups] == [0.2, 2.0]
    opt.param_groups[0]["lr"] = 0.5  # the fit sets its own lr (nanoGPT)
    s.backward(loss_of(model), last_batch=False)
    assert "overwriting" in s.applied.not_applied["lr"] and s.lr_set is None and not s.lr_watch


def test_scaling_refuses_an_optimizer_with_a_scheduler_already_built() -> None:
    opt = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    torch.optim.lr_scheduler.StepLR(opt, 1)
    with pytest.raises(ContextMisuse, match="build your scheduler after ctx.prepare"):
        scale_lrs(opt, 2.0)
