""""Applied" by effect, on the optimizers and schedulers users really write: ReduceLROnPlateau, a Lookahead-style
wrapper, a tensor lr, LBFGS; and no step hook left on an optimizer once its trial ends."""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from typing import Any

import pytest
import torch
from torch import nn

from autotune.training import ContextMisuse, TrainingPlan, TrialContext
from autotune.training.context.trial import run_fit

X = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] > 0).long()


def trial(fit: Any, searched: tuple[str, ...] = ("lr",), **settings: Any) -> Any:
    s = {"epochs": 3, "batch_size": 16, "lr": 0.01, "lr_schedule": "constant", "device": "cpu", **settings}
    return run_fit(fit, TrialContext(TrainingPlan.bare(s, searched=searched)))


def train(ctx: TrialContext, model: nn.Module, each_epoch: Any = None) -> None:
    for _ in ctx.epochs():
        for x, y in ctx.loader((X, Y)):
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        if each_epoch is not None:
            each_epoch()
        ctx.report(val_loss=1.0)


def test_reduce_lr_on_plateau_is_the_fits_own_scheduler_and_the_searched_lr_still_applies() -> None:
    """Its reductions start from the lrs the searched lr scaled: lr applied, lr_schedule not (its own scheduler
    steps the lr), and nothing says the fit overwrote them (today: lr and lr_schedule both dropped)."""
    seen: list[float] = []

    def fit(ctx: TrialContext) -> None:
        model, opt = ctx.prepare(nn.Linear(4, 2), torch.optim.SGD(nn.Linear(4, 2).parameters(), lr=0.1))
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
        train(ctx, model, lambda: (plateau.step(1.0), seen.append(opt.param_groups[0]["lr"])))

    r = trial(fit, searched=("lr", "lr_schedule"), lr_schedule="cosine")
    assert r.not_applied == {"lr_schedule": "your fit's own learning-rate scheduler steps the lr: the searched "
                                            "lr_schedule was not used"}
    assert "lr" not in r.unused and r.effective_lrs == ([0.1], [pytest.approx(0.001)])
    assert seen == pytest.approx([0.001, 0.0005, 0.00025])  # from the scaled 0.001; autotune's cosine did not act


def test_a_plateau_scheduler_held_by_the_fits_object_is_found_too() -> None:
    class Loop:
        def __init__(self, ctx: TrialContext) -> None:
            self.model, self.opt = ctx.prepare(nn.Linear(4, 2), torch.optim.Adam(nn.Linear(4, 2).parameters()))
            self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(self.opt, patience=0)

        def run(self, ctx: TrialContext) -> None:
            train(ctx, self.model, lambda: self.scheduler.step(1.0))

    r = trial(lambda ctx: Loop(ctx).run(ctx), searched=("lr", "lr_schedule"), lr_schedule="onecycle")
    assert set(r.not_applied) == {"lr_schedule"} and "lr" not in r.unused


class TimmLookahead(torch.optim.Optimizer):
    """timm's Lookahead, as written there: no Optimizer.__init__ (so no step hooks of its own), the base's groups."""

    def __init__(self, base_optimizer: torch.optim.Optimizer, alpha: float = 0.5, k: int = 6) -> None:
        self._base_optimizer = base_optimizer
        self.param_groups = base_optimizer.param_groups
        self.defaults = base_optimizer.defaults
        self.state = defaultdict(dict)

    def step(self, closure: Any = None) -> Any:
        return self._base_optimizer.step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._base_optimizer.zero_grad(set_to_none)


class HookedLookahead(TimmLookahead):
    """torch-optimizer's shape: an Optimizer's hooks (its own step hooks work), the base as `.optimizer`."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        super().__init__(optimizer)
        self.optimizer = optimizer
        self._optimizer_step_pre_hooks: dict[int, Any] = OrderedDict()
        self._optimizer_step_post_hooks: dict[int, Any] = OrderedDict()

    @torch.optim.Optimizer.profile_hook_step
    def step(self, closure: Any = None) -> Any:
        return self.optimizer.step(closure)


@pytest.mark.parametrize("wrapper", [TimmLookahead, HookedLookahead])
def test_a_lookahead_around_the_searched_optimizer_trains_at_the_searched_lr_not_its_square(wrapper: type) -> None:
    lrs: list[float] = []

    def fit(ctx: TrialContext) -> None:
        model, opt = ctx.prepare(nn.Linear(4, 2), lambda params: wrapper(ctx.optimizer_factory(params)))
        train(ctx, model, lambda: lrs.append(opt.param_groups[0]["lr"]))

    r = trial(fit, searched=("lr", "optimizer"), optimizer="sgd")
    assert lrs == [0.01] * 3  # not 0.01 x 0.01
    assert r.not_applied == {} and r.effective_lrs is None and {"lr", "optimizer"}.isdisjoint(r.unused)


def test_a_tensor_lr_the_fit_built_with_counts_as_applied() -> None:
    def fit(ctx: TrialContext) -> None:
        net = nn.Linear(4, 2)
        model, _ = ctx.prepare(net, torch.optim.Adam(net.parameters(), lr=torch.tensor(ctx.settings.lr)))
        train(ctx, model)

    r = trial(fit, lr=0.003)
    assert r.not_applied == {} and "lr" not in r.unused


def test_lbfgs_under_ctx_backward_is_one_clear_line_and_stepped_by_the_fit_it_trains() -> None:
    def through_backward(ctx: TrialContext) -> None:
        model, _ = ctx.prepare(nn.Linear(4, 2), lambda p: torch.optim.LBFGS(p, lr=ctx.settings.lr))
        train(ctx, model)

    with pytest.raises(ContextMisuse, match=r"ctx\.backward cannot step LBFGS: its step\(closure\) re-evaluates the "
                                            r"loss itself; step it in your loop instead, opt\.step\(closure\)"):
        trial(through_backward)

    def own_steps(ctx: TrialContext) -> None:
        model, opt = ctx.prepare(nn.Linear(4, 2), lambda p: torch.optim.LBFGS(p, lr=ctx.settings.lr))
        for _ in ctx.epochs():
            for x, y in ctx.loader((X, Y)):
                def closure() -> torch.Tensor:
                    opt.zero_grad()
                    loss = nn.functional.cross_entropy(model(x), y)  # noqa: B023 (this batch's, called right here)
                    loss.backward()
                    return loss
                opt.step(closure)
            ctx.report(val_loss=1.0)

    r = trial(own_steps)
    assert r.not_applied == {} and "lr" not in r.unused


def test_no_step_hook_is_left_on_an_optimizer_once_its_trial_ends() -> None:
    kept: list[torch.optim.Optimizer] = []

    def fit(ctx: TrialContext) -> None:
        model, opt = ctx.prepare(nn.Linear(4, 2))
        kept.append(opt)
        train(ctx, model)

    def own(ctx: TrialContext) -> None:
        net = nn.Linear(4, 2)
        model, opt = ctx.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1))
        kept.append(opt)
        train(ctx, model)

    for f in (fit, own):
        trial(f)
    assert [len(o._optimizer_step_post_hooks) for o in kept] == [0, 0]
    cached = torch.optim.SGD(nn.Linear(4, 2).parameters(), lr=0.1)  # a fit that reuses one optimizer across trials

    def reuse(ctx: TrialContext) -> None:
        model, _ = ctx.prepare(nn.Linear(4, 2), cached)
        train(ctx, model)

    for _ in range(3):
        trial(reuse, searched=())
    assert len(cached._optimizer_step_post_hooks) == 0
