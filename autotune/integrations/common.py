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
    """A framework's training loop, seen by the trial context: `start` once the framework built its optimizer,
    `epoch_begin` / `step` (after each optimizer step, `n_samples` trained on) / `report` (each evaluation's
    metrics, stop rules) / `finish` (the epochs' end)."""

    def __init__(self, ctx: TrialContext) -> None:
        self.ctx = ctx
        self._epochs: Iterator[int] | None = None
        self.early_stop = False  # early stopping ended training: the framework should stop

    def start(self, steps_per_epoch: int, optimizer: Any, model: Any, compiled: bool) -> None:
        st = self.ctx.state
        st.model = model
        if optimizer is not None:  # its steps counted and its lrs noted (a wrapper's inner optimizer steps)
            st.stepper.use(getattr(optimizer, "optimizer", optimizer), None)
        st.clock.compiled = compiled  # the first step's compile is timed apart
        self._epochs = self.ctx.epochs(steps_per_epoch=max(1, steps_per_epoch))

    def epoch_begin(self) -> bool:
        """The next epoch's clock opens; False when the context's epochs are over."""
        assert self._epochs is not None, "start() first"
        return next(self._epochs, None) is not None

    def step(self, n_samples: int) -> None:
        """An optimizer step of `n_samples` ended (the epoch's training ends with its last)."""
        clock = self.ctx.state.clock
        clock.stepped(None, n_samples)
        if clock.probe is not None and not clock.probe.done:
            stop = clock.probe_step(n_samples)
            if stop is not None:
                raise self.ctx.state.stopped(stop) from None

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

    def finish(self) -> None:
        """The framework's training ended: the last epoch closes (an unreported one keeps its clocks)."""
        epochs, self._epochs = self._epochs, None
        if epochs is not None and next(epochs, None) is not None:  # it ran fewer epochs than asked: none opens
            epochs.close()
            st = self.ctx.state
            st.in_epoch = st.clock.running = False


__all__ = ["BUILTIN_ONLY", "BY_CONTEXT", "FrameworkLoop", "check_table", "record_not_applicable",
           "record_received", "require"]
