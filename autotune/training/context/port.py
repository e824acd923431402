"""The trial context's port: what autotune's own training code tells a trial context and reads of it, beside the
user's verbs (prepare, loader, epochs, autocast, backward, report). `TrialContext`'s public names are the user's;
its state is private (`ctx._state`), and the built-in trainer (fit/trainer.py) and the framework adapters
(autotune.integrations) reach it only through a `TrialPort`.

A framework that owns the training loop (a Hugging Face `Trainer`, Lightning) calls no `ctx.backward`: its
callbacks drive the context's epochs, clocks and stop rules through the port's loop. An epoch's training clock
opens when the framework starts the epoch (`epoch_begin`) and ends at the epoch's last optimizer step (`step`), so
evaluation, logging and checkpoint saving after it are not training, as in a loop written on the context. The stop
rules act when the framework's evaluation is reported (`report`), which raises the context's `TrialStopped` out of
the framework's loop: the trial ends PRUNED with its reason.

The user's recipe is the baseline: a framework's trial changes exactly the settings the trial chose (searched, or
fixed in `train:`), says in the trial's ledger (`port.applied`) which of those the framework received (`read`) or
could not apply (`cannot`), and which values it left to the user's code or the framework's defaults
(`left_to_recipe`: stored apart from the trial's settings, shown by `best`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any

import torch
from torch import nn

from autotune.core import ConfigError, suggest
from autotune.spec import is_quality
from autotune.training.context.applied import Applied
from autotune.training.context.misuse import ContextMisuse
from autotune.training.context.plan import TrainingPlan
from autotune.training.context.trial import TrialContext


class TrialPort:
    """One trial context, seen by autotune's own code: its plan, its ledger (`applied`), the optimizer and schedule
    a framework trains with, and a framework's loop (`epoch_begin`, `batch_begin`, `step`, `report`, `finish`).
    `framework`: the framework that owns the training loop ("Lightning", say; None for the built-in trainer), named
    in what the trial records."""

    def __init__(self, ctx: TrialContext, framework: str | None = None) -> None:
        self._ctx = ctx
        self._st = st = ctx._state
        if framework is not None:
            st.applied.framework = framework
        self._epochs: Generator[int, None, None] | None = None
        self._step_end: float | None = None  # when the last step ended (the input wait: until the next begins)
        self._logged_once = False  # the first evaluation's names were checked against the objectives

    # ------------------------------------------------------------ what the trial chose, and what it applied

    @property
    def plan(self) -> TrainingPlan:
        """What the trial trains: its settings (read here without counting as used: the framework's argument is
        what counts), seed, device, config."""
        return self._st.plan

    @property
    def applied(self) -> Applied:
        """The trial's ledger: what it chose (`chose`), what the framework received (`read`), what acted
        (`applied`), could not apply (`cannot`) or was left to the user's recipe (`left_to_recipe`)."""
        return self._st.applied

    def optimizer_factory(self, fused: bool = True, **recipe: Any) -> Callable[[Any], torch.optim.Optimizer]:
        """The trial's optimizer as a factory of parameters (or groups), `recipe` giving the user's values for the
        settings the trial did not choose (lr=TrainingArguments.learning_rate, say). `fused=False`: the framework
        clips gradients itself under mixed precision (a fused optimizer unscales inside its step, and Lightning's
        precision plugin refuses to clip it)."""
        st = self._st
        own = {k: v for k, v in recipe.items() if not st.applied.chose(k)}
        return lambda params: st.build_optimizer(params, own, fused=fused)

    def schedule(self, steps_per_epoch: int) -> torch.optim.lr_scheduler.LRScheduler | None:
        """The trial's lr_schedule over the optimizer ctx.prepare settled, for a framework to step after every
        optimizer step (None: constant)."""
        stepper = self._st.stepper
        stepper.steps_per_epoch = steps_per_epoch
        sched = stepper.make_schedule()
        stepper.decided = True  # the framework steps it: the context's first step decides nothing more
        return sched

    def fresh(self, model: nn.Module, where: str = "", restored: bool = False) -> None:
        """The model a framework trains this trial must be new to this process's study (see TrialState.check_fresh:
        a module-level model trained by the previous trial stops the run with one line naming it). `restored`: the
        adapter restored `model`'s first weights: it is fresh again."""
        if restored:
            self._st.forget_trained(model)
        else:
            self._st.check_fresh(model, where)

    def chance_loss(self, loss: float) -> None:
        """A guess's loss on this data (the built-in trainer's): the divergence rule's ceiling."""
        self._st.rules.chance_loss = loss

    # ------------------------------------------------------------ a framework's loop

    @property
    def running(self) -> bool:
        """An epoch's training clock runs (its training steps count)."""
        return bool(self._st.clock.running)

    def epoch_begin(self, steps_per_epoch: int = 1, epochs: int | None = None, optimizer: Any = None,
                    model: Any = None, compiled: bool | None = None) -> bool:
        """The next epoch's clock opens; False when the context's epochs are over. The first call starts the
        context's epochs, once the framework knows an epoch's steps: `epochs` is the framework's own count (used
        when the trial did not choose `epochs`: the recipe's); `optimizer`, `model`, `compiled`: what the framework
        built, when ctx.prepare did not (the HF Trainer builds its own). Later calls ignore these."""
        if self._epochs is None:
            self._start(steps_per_epoch, epochs, optimizer, model, compiled)
        assert self._epochs is not None
        self._step_end = None
        return next(self._epochs, None) is not None

    def _start(self, steps_per_epoch: int, epochs: int | None, optimizer: Any, model: Any,
               compiled: bool | None) -> None:
        st = self._st
        if epochs is not None and not st.applied.chose("epochs"):
            st.epochs_planned = max(1, int(epochs))
            st.applied.left_to_recipe("epochs", int(epochs))
        if model is not None:
            st.model = model
        if optimizer is not None:  # its steps counted and its lrs noted (a wrapper's inner optimizer steps)
            st.stepper.use(getattr(optimizer, "optimizer", optimizer), None)
        if compiled is not None:
            st.clock.compiled = compiled  # the first step's compile is timed apart
        self._epochs = self._ctx.epochs(steps_per_epoch=max(1, steps_per_epoch))

    def batch_begin(self) -> None:
        """A step begins: the wait since the last one's end is input wait; past the hang limit the trial stops."""
        st = self._st
        now = time.perf_counter()
        if self._step_end is not None:
            st.clock.wait_s += now - self._step_end
        if st.rules.deadline != math.inf and now > st.rules.deadline:
            raise st.stopped(st.rules.hung(st.epoch))

    def step(self, n_samples: int, loss: Any = None) -> None:
        """A step of `n_samples` ended (the epoch's training ends with its last); `loss`: its mean loss (None: the
        framework logs the epoch's loss itself), summed on the device. Every few steps the same checks as
        ctx.backward's (a non-finite loss, the memory cap) and the speed probe's: a stop raises."""
        try:
            self._st.after_step(loss, n_samples)
        finally:
            self._step_end = time.perf_counter()

    def report(self, metrics: Mapping[str, float], logged: str | None = None) -> bool:
        """The epoch's evaluation, by autotune's names: reported to the stop rules (a stop raises). True when the
        framework should stop now (early stopping). The first one must hold every objective the framework reports:
        one missing is a ConfigError naming what the framework logged (`logged`: those names as the user wrote
        them, when they differ from autotune's), and the run stops at its first trial."""
        st = self._st
        if not (st.in_epoch and st.clock.running):  # an evaluation outside an epoch's training (before it): none
            return False
        if not self._logged_once:
            self._logged_once = True
            self._check_objectives(metrics, logged)
        known = st.known
        self._ctx.report(**{k: v for k, v in metrics.items() if known is None or k in known or k == "train_loss"})
        return st.stopped_early_at is not None

    def _check_objectives(self, metrics: Mapping[str, float], logged: str | None) -> None:
        """Each objective a training function reports (not a clock, not measured on a model) is among the first
        evaluation's names; else the framework never logs it, and no trial can be judged."""
        config = self._st.plan.config
        if config is None:
            return
        names = sorted(metrics)
        for i, o in enumerate(config.objectives):
            if is_quality(o.metric) and o.metric not in metrics:
                shown = logged or (", ".join(names) or "nothing")
                raise ConfigError(config.file, f"objectives.{i}.metric",
                                  f"{self._st.applied.framework or 'the training function'} logged no {o.metric} "
                                  f"in the first epoch's evaluation; it logged: {shown}{suggest(o.metric, names)}")

    def finish(self) -> bool:
        """The framework's training ended: the last epoch closes (an unreported one is recorded with its clocks);
        no epoch opens. False when no epoch began."""
        epochs, self._epochs = self._epochs, None
        if epochs is None:
            return False
        st = self._st
        if st.in_epoch and st.clock.running and st.stop is None:
            self._ctx.report()
        epochs.close()
        st.in_epoch = st.clock.running = False
        return True


def refuse_devices(ctx: TrialContext, framework: str) -> None:
    """A framework adapter trains a trial on one device (validation refuses devices > 1 for its fit: reached only
    through other code)."""
    if ctx.world_size > 1 or int(ctx._state.plan.settings.devices) > 1:
        raise ContextMisuse(f"the {framework} integration trains a trial on one device: devices must be 1")


__all__ = ["TrialPort", "refuse_devices"]
