"""Glue for frameworks that own the training loop (Hugging Face `Trainer`, Lightning): their callbacks drive the
trial context's epochs, clocks and stop rules, since their loops call no `ctx.backward`.

An epoch's training clock opens when the framework starts the epoch and ends at the epoch's last optimizer step
(`FrameworkLoop.step`), so evaluation, logging and checkpoint saving after it are not training, as in a loop
written on the context. The stop rules act when the framework's evaluation is reported (`FrameworkLoop.report`),
which raises the context's `TrialStopped` out of the framework's loop: the trial ends PRUNED with its reason.

A mapping table says what each framework does with every setting of the catalogue: a row maps it onto the
framework's own argument (applied when the framework really holds the value), the context applies it around
the trial, or it cannot be applied there (recorded as not applied when a trial chose it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from typing import Any

from autotune.core import ConfigError
from autotune.spec import SETTINGS, applied_by
from autotune.training import TrialContext

# Applied by the trial context whatever trains: around the trial, its stop rules, its clocks.
BY_CONTEXT = applied_by("around", "stop", "clock")
# The built-in trainer's steps after training, refused for any training function at validation (config.checks).
BUILTIN_ONLY = applied_by("after", "checkpoint")


def require(module: str, extra: str, framework: str) -> None:
    """`module` imports, else one line naming the extra to install (exit 2, no traceback)."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ConfigError(None, "trainer", f"the {framework} integration needs {module}: "
                                           f"pip install 'autotune[{extra}]'")


def check_table(mapped: Mapping[str, Any], not_applicable: Mapping[str, str]) -> list[str]:
    """The catalogue's settings that a framework's table leaves out, or lists twice (a test keeps it empty)."""
    covered = [*mapped, *not_applicable, *BY_CONTEXT, *BUILTIN_ONLY]
    return sorted({k for k in SETTINGS if covered.count(k) != 1} | (set(covered) - set(SETTINGS)))


def record_not_applicable(ctx: TrialContext, not_applicable: Mapping[str, str]) -> None:
    """Each setting this trial chose (searched, or fixed in `train:`) that the framework cannot apply: not
    applied, with the reason."""
    st = ctx.state
    for key in st.chosen & set(not_applicable):
        st.not_applied[key] = not_applicable[key]


def record_received(ctx: TrialContext, wanted: Mapping[str, Mapping[str, Any]], holds: Any, where: str) -> None:
    """A mapped setting is applied when the framework holds every value it was given (`wanted`: setting ->
    {argument: value}; `holds`: the framework's object the arguments are read from); else, when the trial chose
    it, not applied, saying what the framework holds. (The optimizer's settings count by their effect instead.)"""
    st = ctx.state
    for key, args in wanted.items():
        held = {arg: getattr(holds, arg, None) for arg in args}
        if held == dict(args):
            st.reads.add(key)
        elif key in st.chosen:
            shown = ", ".join(f"{where}.{a}={held[a]!r}" for a in args if held[a] != args[a])
            st.not_applied[key] = (f"the framework holds {shown}, not what autotune gave it: your code did not "
                                   "train with the arguments autotune built")


class FrameworkLoop:
    """A framework's training loop, seen by the trial context (the HF Trainer's callback and Lightning's drive it):
    `start` once the framework knows an epoch's steps, `epoch_begin` / `batch_begin` (optional: input wait, the
    hang limit) / `step` (after each step, `n_samples` trained on) / `report` (each evaluation's metrics, stop
    rules) / `finish` (the framework's training ended)."""

    def __init__(self, ctx: TrialContext) -> None:
        self.ctx = ctx
        self._epochs: Iterator[int] | None = None
        self._step_end: float | None = None  # when the last step ended (the input wait: until the next begins)
        self.early_stop = False  # early stopping ended training: the framework should stop

    @property
    def started(self) -> bool:
        return self._epochs is not None

    def start(self, steps_per_epoch: int, optimizer: Any = None, model: Any = None,
              compiled: bool | None = None) -> None:
        """The context's epochs begin. `optimizer`, `model`, `compiled`: what the framework built, when
        ctx.prepare did not (the HF Trainer builds its own)."""
        st = self.ctx.state
        if model is not None:
            st.model = model
        if optimizer is not None:  # its steps counted and its lrs noted (a wrapper's inner optimizer steps)
            st.stepper.use(getattr(optimizer, "optimizer", optimizer), None)
        if compiled is not None:
            st.clock.compiled = compiled  # the first step's compile is timed apart
        self._epochs = self.ctx.epochs(steps_per_epoch=max(1, steps_per_epoch))

    def epoch_begin(self) -> bool:
        """The next epoch's clock opens; False when the context's epochs are over."""
        assert self._epochs is not None, "start() first"
        self._step_end = None
        return next(self._epochs, None) is not None

    def batch_begin(self) -> None:
        """A step begins: the wait since the last one's end is input wait; past the hang limit the trial stops."""
        st = self.ctx.state
        now = time.perf_counter()
        if self._step_end is not None:
            st.clock.wait_s += now - self._step_end
        if st.rules.deadline != math.inf and now > st.rules.deadline:
            raise st.stopped(st.rules.hung(st.epoch))

    def step(self, n_samples: int, loss: Any = None, has_loss: bool = True) -> None:
        """A step of `n_samples` ended (the epoch's training ends with its last); `loss`: its mean loss (None: the
        framework logs the epoch's loss itself), summed on the device and checked every few steps. `has_loss`
        False: a stand-in loss (zero) that keeps the periodic checks but adds no samples to the epoch's loss."""
        st = self.ctx.state
        clock = st.clock
        due = clock.stepped(loss, n_samples)
        if loss is not None and not has_loss:
            clock.loss_n -= n_samples
        if due:
            stop = st.rules.periodic(clock.finite(), st.collective, clock.epoch)
            if stop is not None:
                raise st.stopped(stop)
        if clock.probe is not None and not clock.probe.done:
            stop = clock.probe_step(n_samples)
            if stop is not None:
                raise st.stopped(stop) from None
        self._step_end = time.perf_counter()

    def report(self, metrics: Mapping[str, float]) -> bool:
        """The epoch's evaluation: reported to the stop rules (a stop raises). True when the framework should
        stop now (early stopping)."""
        st = self.ctx.state
        if not (st.in_epoch and st.clock.running):  # an evaluation outside an epoch's training (before it): none
            return False
        known = st.known
        self.ctx.report(**{k: v for k, v in metrics.items() if known is None or k in known or k == "train_loss"})
        self.early_stop = st.stopped_early_at is not None
        return self.early_stop

    def finish(self) -> bool:
        """The framework's training ended: the last epoch closes (an unreported one is recorded with its clocks);
        no epoch opens. False when start() never ran."""
        epochs, self._epochs = self._epochs, None
        if epochs is None:
            return False
        st = self.ctx.state
        if st.in_epoch and st.clock.running and st.stop is None:
            self.ctx.report()
        epochs.close()
        st.in_epoch = st.clock.running = False
        return True


__all__ = ["BUILTIN_ONLY", "BY_CONTEXT", "FrameworkLoop", "check_table", "record_not_applicable",
           "record_received", "require"]
