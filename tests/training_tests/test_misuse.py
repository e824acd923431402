"""Misuse checks of the trial context: one clear message each, on what the context was given."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autotune.core.errors import TrialStopped
from autotune.training.context import misuse
from autotune.training.context.misuse import ContextMisuse


def test_metrics_become_floats_and_clocks_are_refused() -> None:
    assert misuse.check_metrics({"val_f1": torch.tensor(0.5), "n": 3}, None, set) == {"val_f1": 0.5, "n": 3.0}
    with pytest.raises(ContextMisuse, match=r"ctx.report\(train_time_s=...\): train_time_s is measured"):
        misuse.check_metrics({"train_time_s": 1.0}, None, set)
    with pytest.raises(ContextMisuse, match="a metric is one number; got a tensor of shape"):
        misuse.check_metrics({"v": torch.zeros(2)}, None, set)
    with pytest.raises(ContextMisuse, match="the dict your fit returned, key 'v': a metric is a number .*; got str"):
        misuse.check_metrics({"v": "x"}, None, set, "the dict your fit returned, key {key!r}")


def test_an_undeclared_metric_names_what_may_be_reported() -> None:
    offered = lambda: misuse.reportable(None, {"val_f1"})  # noqa: E731
    with pytest.raises(ContextMisuse, match="'val_f2' is not an objective or a declared metric.*val_f1"):
        misuse.check_metrics({"val_f2": 1.0}, {"val_f1"}, offered)
    assert misuse.reportable(None, {"val_f1", "train_time_s"}) == {"val_f1", "train_loss", "val_loss"}


def test_step_samples_come_from_the_call_the_loss_or_the_batch() -> None:
    assert misuse.step_samples(torch.tensor(1.0), 7, False, 1) == 7
    assert misuse.step_samples(torch.zeros(5), None, False, 1) == 5
    assert misuse.step_samples(torch.tensor(1.0), None, True, 32) == 32
    with pytest.raises(ContextMisuse, match="n_samples=len"):
        misuse.step_samples(torch.tensor(1.0), None, False, 1)
    with pytest.raises(ContextMisuse, match="an int >= 1; got True"):
        misuse.step_samples(torch.tensor(1.0), True, False, 1)
    with pytest.raises(ContextMisuse, match="takes the loss tensor; got float"):
        misuse.step_samples(1.0, None, True, 1)


def test_backward_refusals_say_what_is_wrong() -> None:
    with pytest.raises(ContextMisuse, match="after the trial was stopped"):
        misuse.refuse_backward(TrialStopped("slow", 1, "x"), True, True, 1, True)
    with pytest.raises(ContextMisuse, match="outside `for epoch in ctx.epochs\\(\\)`"):
        misuse.refuse_backward(None, False, False, 0, True)
    with pytest.raises(ContextMisuse, match="after ctx.report in epoch 2"):
        misuse.refuse_backward(None, True, False, 2, True)
    with pytest.raises(ContextMisuse, match="before ctx.prepare"):
        misuse.refuse_backward(None, True, True, 1, False)


def test_the_optimizer_given_to_prepare() -> None:
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert misuse.optimizer_of(opt, model) is opt
    assert isinstance(misuse.optimizer_of(lambda ps: torch.optim.Adam(ps), model), torch.optim.Adam)
    with pytest.raises(ContextMisuse, match="returned list, not a torch.optim.Optimizer"):
        misuse.optimizer_of(lambda ps: list(ps), model)
    with pytest.raises(ContextMisuse, match="optimizer must be None"):
        misuse.optimizer_of(3, model)
    with pytest.raises(ContextMisuse, match="one model per trial"):
        misuse.check_model(model, True)


def test_epochs_and_the_returned_value() -> None:
    with pytest.raises(ContextMisuse, match="iterate it once"):
        misuse.check_epochs(True, None)
    with pytest.raises(ContextMisuse, match="steps_per_epoch=...\\): the ctx.backward calls"):
        misuse.check_epochs(False, 0)
    with pytest.raises(ContextMisuse, match="returned without an epoch"):
        misuse.check_returned(None, 0)
    with pytest.raises(ContextMisuse, match="got list"):
        misuse.check_returned([1], 1)
    misuse.check_returned({"v": 1.0}, 1)
