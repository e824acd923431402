"""What a trial context keeps for autotune's own code, off the user's API (as accelerate keeps its state on
`AcceleratorState`): `TrialSetup`, what the runner gives a context besides the settings (limits, callbacks, the
study's config, the device group, the speed probe, the searched keys), and `TrialState` (the context's private
`_state`): its parts, its records, its stop, and what the runner reads once `fit` returned (`result()`,
`unapplied()`). autotune's own code outside this package reaches it only through the port (port.py).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from autotune.core import ConfigError, TrialStopped
from autotune.spec import BUILTIN_ONLY, SETTINGS, RunConfig, Settings, applied_by
from autotune.training import accel
from autotune.training.context import applied as unread
from autotune.training.context import misuse
from autotune.training.context.collective import collective
from autotune.training.context.epoch_clock import EpochClock, steady_rate, wait_fraction
from autotune.training.context.limits import Limits
from autotune.training.context.records import EpochRecord, OnEpoch, Shaped, TrainResult
from autotune.training.context.stepper import Stepper, post_hook, remove_hooks
from autotune.training.context.stop_rules import StopRules
from autotune.training.distributed.devices import Group
from autotune.training.optimizers import make_optimizer
from autotune.training.throughput import ProbeWindow

# Applied by the trial context around every trial, its stop rules and its clocks, whatever trains: autotune's values
# for these are the trial's even where a framework owns the loop (integrations/tables.py reads it too).
BY_CONTEXT = applied_by("around", "stop", "clock")
# Models an earlier trial of a study trained in this process: one handed to a later trial would go on from there.
_TRAINED: weakref.WeakSet[nn.Module] = weakref.WeakSet()


@dataclass(frozen=True)
class TrialSetup:
    """The plumbing of one trial context, from autotune's runner (a bare `TrialContext(settings)` takes the defaults).

    `on_record` sees each epoch's record, `on_epoch` may raise TrialStopped; `metrics`: what ctx.report may take
    (None: anything); `early_stopping_on`: the metrics early stopping watches; `chance_loss`: a guess's loss (the
    divergence rule's ceiling); `config`: the study's RunConfig; `group`: this rank's device group (several
    devices); `probe`: the speed probe's window; `searched` / `fixed`: the keys this trial searched / set explicitly.
    """

    limits: Limits = field(default_factory=Limits)
    on_record: OnEpoch | None = None
    on_epoch: OnEpoch | None = None
    metrics: Iterable[str] | None = None
    early_stopping_on: Sequence[tuple[str, str]] = (("val_loss", "minimize"),)
    chance_loss: float = math.inf
    config: RunConfig | None = None
    group: Group | None = None
    probe: ProbeWindow | None = None
    searched: Iterable[str] = ()
    fixed: Iterable[str] = ()


class TrialState:
    """One context's parts and records: `clock` (clocks, counters, compile time, the probe's hooks), `stepper`
    (GradScaler, accumulation, clipping, the optimizer and schedule steps), `rules` (stop decisions), `collective`
    (what the ranks agree on); what the trial read (`reads`), what it could not apply (`not_applied`), its epochs'
    records (`history`) and its stop (`stop`)."""

    def __init__(self, raw: Settings, setup: TrialSetup) -> None:
        self.setup = setup
        self.raw = raw
        # What this trial read (applied): the context's uses, the fit's reads (ctx.settings, ctx.params); a searched
        # key nothing read is not_applied. One `searched` or `fixed` explicitly is chosen (a searched lr scales lrs).
        self.reads: set[str] = set(unread.APPLIED_AROUND)
        self.searched = tuple(setup.searched)
        self.chosen = frozenset(self.searched) | frozenset(setup.fixed)
        self.settings = raw.watched(self.reads)  # typed and frozen: ctx.settings["lr"] or ctx.settings.lr
        self.collective = coll = collective(setup.group)  # a no-op in one process
        self.device = accel.resolve_device(str(raw["device"]))
        self.chance_loss = setup.chance_loss  # divergence: a loss above loss_factor x this is never "learning"
        objectives = [o.metric for o in setup.config.objectives] if setup.config is not None else []  # (a study's)
        self.rules = StopRules(self.settings, setup.limits, setup.on_record, setup.on_epoch, setup.early_stopping_on,
                               objectives=objectives)
        self.known = None if setup.metrics is None else set(setup.metrics)
        self.not_applied: dict[str, str] = {}
        self.history: list[EpochRecord] = []
        self.model: nn.Module | None = None  # the prepared, uncompiled model
        scaler = accel.grad_scaler(self.device, str(raw["precision"]))
        self.stepper = Stepper(self.settings, self.reads, self.searched, scaler, int(raw["grad_accum_steps"]),
                               self.not_applied)
        # (a trial on several devices is not probed: a stop on rank 0 alone would strand the others)
        self.clock = EpochClock(self.device, self.settings, coll, setup.probe if coll.world == 1 else None,
                                float(raw["data_fraction"]))
        self.own_optimizer: bool | None = None  # None: no ctx.prepare yet; True: the fit built its optimizer
        self.built: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # the optimizers autotune built
        # Settings that shaped training by their effect (unread.EFFECT_KEYS: reads of these prove nothing): the
        # settings an optimizer autotune built took, once it stepped; see `effects_now` for the rest.
        self.effects: set[str] = set()
        self.built_with: set[str] = set()  # lr, momentum, weight_decay the fit read and built its optimizer with
        self.init_asked: bool | None = None  # ctx.prepare's init (None: not called)
        self.train_on_device: bool | None = None  # the training loader's batches: on the device (None: no loader)
        self.stop: TrialStopped | None = None
        self.in_epoch = False  # inside the body of `for epoch in ctx.epochs()` (its clock: self.clock.running)
        # A framework that owns the loop (port.py): its name, and the settings its recipe decided (setting -> the
        # value the user's code or the framework's default held: the trial left them as they were).
        self.framework: str | None = None
        self.recipe: dict[str, Any] = {}
        self.epochs_planned: int | None = None  # the framework's own epoch count (epochs not chosen)
        self.fused = True  # fused optimizer kernels allowed (not where a framework must clip mixed precision)
        self.handles: list[Any] = []  # the step hooks on the optimizers autotune built (removed by `close`)

    def close(self) -> None:
        """The fit returned (or raised): the meters stop, and no optimizer keeps a step hook of this trial."""
        self.clock.close_meters()
        remove_hooks(self.handles)
        remove_hooks(self.stepper.handles)

    @property
    def epochs_total(self) -> int:
        if self.epochs_planned is not None:
            return self.epochs_planned
        return int(self.settings["epochs"])

    @property
    def in_study(self) -> bool:
        """The context runs a study's trial (the runner's plumbing has its config), not a bare one."""
        return self.setup.config is not None

    def build_optimizer(self, params: Any, recipe: Mapping[str, Any] | None = None) -> torch.optim.Optimizer:
        """The trial's optimizer over `params` (`recipe`: values of the user's own for settings the trial did not
        choose, lr from TrainingArguments say; they are not autotune's, so their effect is not recorded)."""
        took: set[str] = set()  # what this optimizer's builder read: the settings it takes
        raw = self.raw.replace(**recipe) if recipe else self.raw
        s = raw.watched(took)
        opt = make_optimizer(s["optimizer"], params, s, self.device, fused=self.fused)
        self.built.add(opt)
        took -= set(recipe or ())
        # applied once it steps (whoever steps it), not when built; (a weak reference: no cycle through it)
        me = weakref.ref(self)

        def stepped(_: Any) -> None:
            st = me()
            if st is not None:
                st.effects.update(took)
        self.handles += post_hook(opt, stepped)
        return opt

    def check_fresh(self, model: nn.Module, where: str) -> None:
        """A study's trial trains a model no earlier trial in this process trained: one that did (a module-level
        model, say) would start where that trial ended. One line, and the run stops (a ConfigError)."""
        if not self.in_study or model not in _TRAINED:
            return
        name = misuse.global_name(model)
        shown = f"{name} ({type(model).__name__})" if name else f"a {type(model).__name__}"
        raise ConfigError(self.setup.config.file if self.setup.config is not None else None, "trainer",
                          f"{where} got {shown}, the model object an earlier trial already trained: this trial would "
                          "start where that one ended. Build the model inside your training function, so each trial "
                          "trains a fresh one")

    @staticmethod
    def forget_trained(model: nn.Module) -> None:
        """`model`'s first weights were restored (the HF Trainer reused by every trial): fresh again."""
        _TRAINED.discard(model)

    def trained(self) -> None:
        """The trial is over: its model, if it stepped, is not fresh for a later trial."""
        if self.in_study and self.model is not None and self.stepper.opt_steps:
            _TRAINED.add(self.model)

    @property
    def epoch(self) -> int:  # the epoch running (0 before ctx.epochs)
        return int(self.clock.epoch)

    @property
    def opt(self) -> torch.optim.Optimizer | None:  # the optimizer ctx.prepare returned
        return self.stepper.opt

    @property
    def scaler(self) -> Any:  # the GradScaler (fp16 on a GPU), else None
        return self.stepper.scaler

    @property
    def stopped_early_at(self) -> int | None:  # the epoch early stopping ended training at
        return self.rules.stopped_early_at

    def stopped(self, stop: TrialStopped) -> TrialStopped:
        self.stop = stop
        self.clock.running = False
        return stop

    def after_step(self, loss: torch.Tensor | None, n_samples: int) -> None:
        """A training step of `n_samples` ended (ctx.backward's, or a framework's through the port; `loss` its mean,
        None when the framework logs the epoch's loss itself): counted, and every FINITE_CHECK_EVERY steps the
        periodic checks (a non-finite loss, the memory cap, on several devices the hang), then the speed probe's
        step. A stop raises."""
        clock = self.clock
        if clock.stepped(loss, n_samples):
            stop = self.rules.periodic(clock.finite(), self.collective, clock.epoch, clock.memory.peak_mb)
            if stop is not None:
                raise self.stopped(stop)
        if clock.probe is not None and not clock.probe.done:
            stop = clock.probe_step(n_samples)
            if stop is not None:
                raise self.stopped(stop) from None

    def metrics(self, metrics: Mapping[str, Any], where: str = "ctx.report({key}=...)") -> dict[str, float]:
        return misuse.check_metrics(metrics, self.known, lambda: misuse.reportable(self.setup.config, self.known),
                                    where)

    def effects_now(self) -> set[str]:
        """The optimizer settings and lr_schedule that shaped training (unread.EFFECT_KEYS), by what happened: the
        optimizer autotune built stepped (its settings), or the fit's own stepped with its lrs scaled by a chosen
        lr or built with the values it read; the context's schedule decided the lr (no scheduler of the fit's own,
        no lrs the fit set itself)."""
        st = self.stepper
        out = set(self.effects) & set(unread.EFFECT_KEYS)
        if self.own_optimizer and st.opt_steps:
            out |= self.built_with | ({"lr"} if st.scaled is not None else set())
        if st.decided and not st.own_scheduler:
            out.add("lr_schedule")
        return out - {"lr", "lr_schedule"} if st.overwritten else out

    def _applied(self, key: str, effects: set[str]) -> bool:
        return key in effects if key in unread.EFFECT_KEYS else key in self.reads

    def unapplied(self) -> dict[str, str]:
        """Settings the trial chose that took no effect, with the reason: what the context could not apply, every
        chosen optimizer setting or lr_schedule that did not act (whoever read it), and every other chosen setting
        (or searched `user.` parameter) nothing read (applied.py says why). Chosen: searched, or fixed explicitly
        (`train:`), but not those the context applies around every trial (BY_CONTEXT: no read proves them) nor the
        built-in trainer's steps after training (BUILTIN_ONLY: validation refuses them off their default elsewhere)."""
        out = dict(self.not_applied)
        effects = self.effects_now()
        fixed = sorted(k for k in self.chosen - set(self.searched)
                       if k in SETTINGS and k not in BY_CONTEXT and k not in BUILTIN_ONLY)
        missed = [k for k in [*self.searched, *fixed] if not self._applied(k, effects) and k not in out]
        for key in missed:
            out[key] = unread.why(self, key, missed)
        return out

    def unused(self) -> list[str]:
        """Settings whose values did not shape this trial, searched or not (a default optimizer adam under the fit's
        own SGD): the trial's stored settings leave them out. Under a framework that owns the loop, every setting
        the trial did not choose is the recipe's unless the context applies it around the trial (its recipe
        values are stored apart, `recipe`)."""
        effects = self.effects_now()
        out = set(self.unapplied()) | {k for k in unread.EFFECT_KEYS if k not in effects}
        if self.framework is not None:
            out |= {k for k in SETTINGS if k not in self.chosen and (k in self.recipe or (
                k not in BY_CONTEXT and k not in self.reads))}
        return sorted(out)

    def effective_lrs(self) -> tuple[list[float], list[float]] | None:
        """(the fit's optimizer's own group lrs, what a chosen lr scaled them to), when that took effect."""
        scaled = self.stepper.scaled
        return None if scaled is None or "lr" not in self.effects_now() else (scaled[1], scaled[2])

    def shaped(self) -> Shaped | None:
        """What shaped the run so far, once it began training (an optimizer step, an epoch, or a framework's recipe
        read): for a trial that stops or fails, stored as a trained one's is. None before that: nothing trained."""
        if not (self.history or self.stepper.opt_steps or self.recipe):
            return None
        return Shaped(not_applied=self.unapplied(), unused=self.unused(), recipe=dict(self.recipe),
                      effective_lrs=self.effective_lrs())

    def result(self, returned: Any = None) -> TrainResult:
        """The run's result once `fit` returned: the last epoch's metrics, then whatever fit returned (a dict)."""
        misuse.check_returned(returned, len(self.history))
        final = dict(self.history[-1].metrics)
        if returned is not None:
            final.update(self.metrics(returned, "the dict your fit returned, key {key!r}"))
        return TrainResult(
            final=final, train_time_s=self.clock.train_time_s, samples_per_s=steady_rate(self.history),
            compile_time_s=self.clock.compile_time_s, data_wait_fraction=wait_fraction(self.history),
            epochs_run=len(self.history), device=accel.device_name(self.device), precision=self.raw["precision"],
            history=list(self.history), stopped_early_at=self.stopped_early_at,
            loss_scale=float(self.scaler.get_scale()) if self.scaler is not None else None,
            not_applied=self.unapplied(), unused=self.unused(), effective_lrs=self.effective_lrs(), model=self.model,
            model_params=sum(p.numel() for p in self.model.parameters()) if self.model is not None else 0,
            peak_memory_mb=self.history[-1].peak_memory_mb, energy_j=self.history[-1].energy_j,
            meters=self.clock.meters(), recipe=dict(self.recipe),
        )


__all__ = ["TrialSetup", "TrialState"]
