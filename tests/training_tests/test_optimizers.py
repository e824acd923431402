"""The optimizer and schedule registries: every registered name builds its torch class with the settings'
flags (through the trial context, as a trial gets it), and the catalogue's names are the registries' keys."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from autotune.core.errors import ConfigError
from autotune.spec import Settings
from autotune.spec.settings import DEFAULTS, SETTINGS
from autotune.training import optimizers
from autotune.training.context.trial import TrialContext

# A name added to the registry without a row here fails the contract test (KeyError): say what it must build.
CLASSES: dict[str, type[torch.optim.Optimizer]] = {
    "sgd": torch.optim.SGD, "sgd_nesterov": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
    "rmsprop": torch.optim.RMSprop,
}
WITH_MOMENTUM = ("sgd", "sgd_nesterov", "rmsprop")  # the others take betas, not momentum


def test_catalogue_names_are_the_registries() -> None:
    assert SETTINGS["optimizer"].choices == tuple(optimizers.OPTIMIZERS)
    assert SETTINGS["lr_schedule"].choices == tuple(optimizers.SCHEDULES)
    assert set(CLASSES) == set(optimizers.OPTIMIZERS)


@pytest.mark.parametrize("name", optimizers.OPTIMIZERS)
def test_every_optimizer_class_and_flags(name: str) -> None:
    ctx = TrialContext({**DEFAULTS, "device": "cpu", "optimizer": name, "lr": 0.05, "momentum": 0.5,
                        "weight_decay": 1e-4})
    _, opt = ctx.prepare(torch.nn.Linear(4, 2))
    assert type(opt) is CLASSES[name]
    group = opt.param_groups[0]
    assert group["lr"] == 0.05 and group["weight_decay"] == 1e-4
    assert group.get("momentum", 0.0) == (0.5 if name in WITH_MOMENTUM else 0.0)
    assert group.get("nesterov", False) == (name == "sgd_nesterov")
    assert group.get("fused") is (True if name in optimizers.FUSED else None)  # fused kernels where torch has them


def test_nesterov_without_momentum_is_plain_sgd() -> None:
    opt = optimizers.make_optimizer("sgd_nesterov", [torch.nn.Parameter(torch.zeros(2))],
                                    Settings({**DEFAULTS, "momentum": 0.0}), torch.device("cpu"))
    assert opt.param_groups[0]["nesterov"] is False  # torch refuses nesterov with momentum 0


def test_weight_decay_reaches_the_update() -> None:
    """A zero gradient still moves the weights when weight_decay is on: the flag is in the update, not only stored."""
    moved = {}
    for wd in (0.0, 0.1):
        p = torch.nn.Parameter(torch.ones(3))
        s = Settings({**DEFAULTS, "lr": 0.5, "momentum": 0.0, "weight_decay": wd})
        opt = optimizers.make_optimizer("sgd", [p], s, torch.device("cpu"))
        p.grad = torch.zeros(3)
        opt.step()
        moved[wd] = float((1 - p.detach()).abs().max())
    assert moved[0.0] == 0.0 and moved[0.1] == pytest.approx(0.5 * 0.1)


# The lr of each of 10 steps at peak 0.1: what each registered schedule must do (KeyError: a new one needs a row).
SHAPES: dict[str, Callable[[list[float]], bool]] = {
    "constant": lambda lrs: all(lr == pytest.approx(0.1) for lr in lrs),
    "cosine": lambda lrs: lrs[0] == pytest.approx(0.1) and all(b < a for a, b in zip(lrs, lrs[1:])) and lrs[-1] < 0.01,
    "onecycle": lambda lrs: lrs[0] < 0.01 and max(lrs) == pytest.approx(0.1) and lrs.index(max(lrs)) > 0
    and lrs[-1] < 1e-3,  # warm up, then anneal
}


@pytest.mark.parametrize("name", optimizers.SCHEDULES)
def test_every_schedule_shapes_the_lr(name: str) -> None:
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=0.1)
    build = optimizers.SCHEDULES[name]
    sched = build(opt, 10) if build is not None else None
    lrs = []
    for _ in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched is not None:
            sched.step()
    assert SHAPES[name](lrs), (name, lrs)


def test_unknown_optimizer_is_one_line_with_close_match() -> None:
    with pytest.raises(ConfigError) as info:
        optimizers.make_optimizer("adamm", [torch.nn.Parameter(torch.zeros(2))], Settings(), torch.device("cpu"))
    msg = str(info.value)
    assert "\n" not in msg
    assert msg == "<config>: optimizer: unknown optimizer 'adamm' (did you mean 'adam'?); allowed: adam, adamw, " \
                  "rmsprop, sgd, sgd_nesterov"
