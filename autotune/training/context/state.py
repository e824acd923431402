"""What a trial context keeps for autotune's own code, off the user's API (as accelerate keeps its state on
`AcceleratorState`): `TrialState` (the context's private `_state`), its plan (plan.TrainingPlan, as the runner
handed it), its ledger (applied.Applied), its parts, its epochs' records, its stop, and what the runner reads once
`fit` returned (`result()`). autotune's own code outside this package reaches it only through the port (port.py).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from autotune.core import ConfigError, TrialStopped
from autotune.spec import Settings
from autotune.training import accel
from autotune.training.context import misuse
from autotune.training.context.applied import Applied
from autotune.training.context.collective import collective
from autotune.training.context.epoch_clock import EpochClock, steady_rate, wait_fraction
from autotune.training.context.plan import TrainingPlan
from autotune.training.context.results import EpochRecord, OnEpoch, Shaped, TrainResult
from autotune.training.context.stepper import Stepper, post_hook, remove_hooks
from autotune.training.context.stop_rules import StopRules
from autotune.training.distributed.devices import Group
from autotune.training.optimizers import make_optimizer
from autotune.training.throughput import ProbeWindow

# Models an earlier trial of a study trained in this process: one handed to a later trial would go on from there.
_TRAINED: weakref.WeakSet[nn.Module] = weakref.WeakSet()


class TrialState:
    """One context's plan and parts: `plan` (what the runner decided), `applied` (the ledger: chosen, read,
    applied, not applied, the recipe), `settings` (the plan's, read through the ledger), `clock` (clocks, counters,
    compile time, the probe's hooks), `stepper` (GradScaler, accumulation, clipping, the optimizer and schedule
    steps), `rules` (stop decisions), `collective` (what the ranks agree on); its epochs' records (`history`), the
    prepared model, its stop, whether an epoch's body runs, and a framework's own epoch count."""

    def __init__(self, plan: TrainingPlan, group: Group | None = None, probe: ProbeWindow | None = None,
                 on_record: OnEpoch | None = None, on_epoch: OnEpoch | None = None) -> None:
        self.plan = plan
        # One `searched` or `fixed` explicitly is chosen (a searched lr scales lrs); a searched key nothing applied
        # is not_applied.
        self.applied = Applied(plan.searched, plan.fixed)
        self.settings = self.applied.watch(plan.settings)  # typed and frozen: ctx.settings["lr"] or ctx.settings.lr
        self.collective = coll = collective(group)  # a no-op in one process
        self.rules = StopRules(self.settings, plan.limits, on_record, on_epoch, plan.early_stopping_on,
                               objectives=plan.objectives)
        self.history: list[EpochRecord] = []
        self.model: nn.Module | None = None  # the prepared, uncompiled model
        raw = plan.settings
        self.stepper = Stepper(self.settings, self.applied, accel.grad_scaler(plan.device, str(raw["precision"])),
                               int(raw["grad_accum_steps"]))
        # (a trial on several devices is not probed: a stop on rank 0 alone would strand the others)
        self.clock = EpochClock(plan.device, self.settings, coll, probe if coll.world == 1 else None,
                                float(raw["data_fraction"]))
        self.stop: TrialStopped | None = None
        self.in_epoch = False  # inside the body of `for epoch in ctx.epochs()` (its clock: self.clock.running)
        self.epochs_planned: int | None = None  # a framework's own epoch count (epochs not chosen)

    @property
    def raw(self) -> Settings:
        """The plan's settings, read without noting (autotune's own bookkeeping)."""
        return self.plan.settings

    @property
    def known(self) -> set[str] | None:
        """What ctx.report may take (None: anything)."""
        return None if self.plan.metrics is None else set(self.plan.metrics)

    def close(self) -> None:
        """The fit returned (or raised): the meters stop, and no optimizer keeps a step hook of this trial."""
        self.clock.close_meters()
        remove_hooks(self.stepper.handles)

    @property
    def epochs_total(self) -> int:
        if self.epochs_planned is not None:
            return self.epochs_planned
        return int(self.settings["epochs"])

    def build_optimizer(self, params: Any, recipe: Mapping[str, Any] | None = None,
                        fused: bool = True) -> torch.optim.Optimizer:
        """The trial's optimizer over `params` (`recipe`: values of the user's own for settings the trial did not
        choose, lr from TrainingArguments say; they are not autotune's, so their effect is not recorded; `fused`:
        fused kernels allowed, not where a framework clips mixed-precision gradients itself)."""
        took: set[str] = set()  # what this optimizer's builder read: the settings it takes
        raw = self.raw.replace(**recipe) if recipe else self.raw
        s = raw.watched(took)
        opt = make_optimizer(s["optimizer"], params, s, self.plan.device, fused=fused)
        self.applied.built.add(opt)
        took -= set(recipe or ())
        # applied once it steps (whoever steps it), not when built; (a weak reference: no cycle through it)
        ledger = weakref.ref(self.applied)

        def stepped(_: torch.optim.Optimizer) -> None:
            applied = ledger()
            if applied is not None:
                applied.applied(*took)

        self.stepper.handles += post_hook(opt, stepped)
        return opt

    def check_fresh(self, model: nn.Module, where: str) -> None:
        """A study's trial trains a model no earlier trial in this process trained: one that did (a module-level
        model, say) would start where that trial ended. One line, and the run stops (a ConfigError)."""
        if self.plan.config is None or model not in _TRAINED:
            return
        name = misuse.global_name(model)
        shown = f"{name} ({type(model).__name__})" if name else f"a {type(model).__name__}"
        raise ConfigError(self.plan.config_file, "trainer",
                          f"{where} got {shown}, the model object an earlier trial already trained: this trial would "
                          "start where that one ended. Build the model inside your training function, so each trial "
                          "trains a fresh one")

    @staticmethod
    def forget_trained(model: nn.Module) -> None:
        """`model`'s first weights were restored (the HF Trainer reused by every trial): fresh again."""
        _TRAINED.discard(model)

    def trained(self) -> None:
        """The trial is over: its model, if it stepped, is not fresh for a later trial."""
        if self.plan.config is not None and self.model is not None and self.stepper.opt_steps:
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
        known = self.known
        return misuse.check_metrics(metrics, known, lambda: misuse.reportable(self.plan.config, known), where)

    def unapplied(self) -> dict[str, str]:
        """The chosen settings that took no effect, with the reason (the ledger's, applied.Applied.unapplied)."""
        return self.applied.unapplied(self.stepper, self.raw)

    def shaped(self) -> Shaped | None:
        """What shaped the run so far, once it began training (an optimizer step, an epoch, or a framework's recipe
        read): for a trial that stops or fails, stored as a trained one's is. None before that: nothing trained."""
        if not (self.history or self.stepper.opt_steps or self.applied.began()):
            return None
        return self.applied.record(self.stepper, self.raw)

    def result(self, returned: Any = None) -> TrainResult:
        """The run's result once `fit` returned: the last epoch's metrics, then whatever fit returned (a dict)."""
        misuse.check_returned(returned, len(self.history))
        final = dict(self.history[-1].metrics)
        if returned is not None:
            final.update(self.metrics(returned, "the dict your fit returned, key {key!r}"))
        shaped = self.applied.record(self.stepper, self.raw)
        return TrainResult(
            final=final, train_time_s=self.clock.train_time_s, samples_per_s=steady_rate(self.history),
            compile_time_s=self.clock.compile_time_s, data_wait_fraction=wait_fraction(self.history),
            epochs_run=len(self.history), device=accel.device_name(self.plan.device), precision=self.raw["precision"],
            history=list(self.history), stopped_early_at=self.stopped_early_at,
            loss_scale=float(self.scaler.get_scale()) if self.scaler is not None else None,
            not_applied=shaped.not_applied, unused=shaped.unused, effective_lrs=shaped.effective_lrs,
            model=self.model,
            model_params=sum(p.numel() for p in self.model.parameters()) if self.model is not None else 0,
            peak_memory_mb=self.history[-1].peak_memory_mb, energy_j=self.history[-1].energy_j,
            meters=self.clock.meters(), recipe=shaped.recipe,
        )


__all__ = ["TrialState"]
