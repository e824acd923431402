"""Tune a Hugging Face `Trainer` as it is: the user's `Trainer` and `TrainingArguments` are the baseline; a trial
changes exactly the settings it chose (searched, or fixed in `train:`), through the table's mapping
(`tables.HF`), and a `TrainerCallback` keeps the trial context's clocks and stop rules.

    from autotune.integrations import hf

    trainer = Trainer(model=model, args=training_args, ...)   # your script, as the guide writes it
    fit = hf.trainer_fit(trainer)                              # `trainer: my_script:fit` in the YAML

or, where the model is built per trial (reading the trial's settings or `user.` parameters):

    def make_trainer(args, ctx):                  # your code, given the trial's TrainingArguments (ctx optional)
        return Trainer(model=MyModel(width=ctx.params["width"]), args=args, train_dataset=train, ...)

    fit = hf.trainer_fit(make_trainer, output_dir="runs/hf")   # your own TrainingArguments as keywords

A `Trainer` object is reused by every trial: each trial restores the model's first weights (those it had when the
first trial began), builds a fresh optimizer, and gives the Trainer the trial's TrainingArguments (as the Trainer's
own hyper-parameter search does). A setting the trial did not choose keeps the user's value (or the Trainer's
default: AdamW stays AdamW, lr_scheduler_type linear stays, the warmup, max_grad_norm 1.0); the trial records
what the Trainer held for each (`recipe`). Each epoch is evaluated and logged (`eval_strategy` and
`logging_strategy` "epoch"); a `seed` the user set trains (the recipe's, recorded there), else the trial's seed;
`eval_X` metrics are reported as `val_X` (`eval_loss` is `val_loss`), the epoch's
logged `loss` as `train_loss`. An epoch's training clock runs from the Trainer's epoch start to its last
optimizer step: evaluation, logging and checkpoint saving (`save_strategy` "no" unless given; "steps" becomes
"epoch") are not training. Each trial writes under its own `output_dir/seed-N` (N: the trial's seed). A stop
(divergence, slow, dominated, the pruner) raises out of `trainer.train()` and the trial ends PRUNED with its
reason. One device per trial (`devices: 1`).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from autotune.core import ADAPTER, ONE_DEVICE, ConfigError
from autotune.integrations import framework_compat as compat
from autotune.integrations.common import quiet_frameworks, record_cannot, require
from autotune.integrations.tables import HF, HF_OBJECT, HF_SPEED_KEYS, Framework, enum_value
from autotune.training import ContextMisuse, TrialContext, TrialPort, refuse_devices

require("transformers", "hf", "Hugging Face")
require("accelerate", "hf", "Hugging Face")

from transformers import (  # noqa: E402
    PrinterCallback,
    ProgressCallback,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

FRAMEWORK = "the Hugging Face Trainer"


class _View:
    """The user's TrainingArguments with the trial's changes so far (a mapped value that depends on another)."""

    def __init__(self, base: Any, changes: Mapping[str, Any]) -> None:
        self._base, self._changes = base, changes

    def __getattr__(self, name: str) -> Any:
        return self._changes[name] if name in self._changes else getattr(self._base, name)


def trial_arguments(port: TrialPort, base: TrainingArguments, given: set[str] | None = None
                    ) -> tuple[TrainingArguments, dict[str, dict[str, Any]]]:
    """The trial's TrainingArguments: the user's (`base`; `given`: the names the user set, None: those that differ
    from TrainingArguments' defaults), the settings the trial chose mapped onto theirs, then what autotune's
    records need (each epoch evaluated and logged, the trial's seed unless the user set one, its own output folder).
    Also setting ->
    {argument: value} for each chosen setting."""
    s = port.plan.settings
    changes: dict[str, Any] = {}
    wanted: dict[str, dict[str, Any]] = {}
    for key, a in HF.mapped.items():
        if port.applied.chose(key) and a.on == "args":
            wanted[key] = a.to(s[key], _View(base, changes))
            changes.update(wanted[key])
    if "compile_mode" in wanted and not _View(base, changes).torch_compile:
        changes["torch_compile_mode"] = None  # (HF turns compile on for a mode: compile_mode acts with compile)
    given = _given(base) if given is None else given
    # (push_to_hub off: a trial's checkpoints are not the user's model, and every trial would push to one repository)
    changes.update(eval_strategy="epoch", logging_strategy="epoch", push_to_hub=False,
                   use_cpu=port.plan.device.type == "cpu",
                   output_dir=os.path.join(str(base.output_dir or "trainer_output"), f"seed-{port.plan.seed}"))
    if "seed" in given:  # the user's seed is the recipe's: the Trainer trains with it, and the record says so
        port.applied.left_to_recipe("seed", base.seed)
    else:  # left to the Trainer's default: the trial's own seed (its record's `seed`)
        changes["seed"] = port.plan.seed
    # a checkpoint saved mid-epoch would be inside the training clock: "steps" saves each epoch instead, and the
    # Trainer's default (every 500 steps) saves nothing (unless the best model is loaded at the end)
    if str(enum_value(base.save_strategy)) == "steps":
        changes["save_strategy"] = "epoch" if "save_strategy" in given or base.load_best_model_at_end else "no"
    for name, quiet in (("report_to", "none"), ("disable_tqdm", True)):
        if name not in given:  # autotune prints the trials' progress
            changes[name] = quiet
    return dataclasses.replace(base, **changes), wanted


def _given(args: TrainingArguments) -> set[str]:
    """The TrainingArguments a user set (those away from the dataclass's defaults)."""
    out = set()
    for f in dataclasses.fields(args):
        if not f.init or f.default is dataclasses.MISSING:
            continue
        value = enum_value(getattr(args, f.name))
        if value != enum_value(f.default) and not (f.default is None and not value):  # (None: derived in __post_init__)
            out.add(f.name)
    return out


def _not_held(port: TrialPort, args: TrainingArguments, wanted: Mapping[str, Mapping[str, Any]]) -> None:
    """Each chosen setting is applied when the Trainer that trains holds every argument it became (a make_trainer
    building TrainingArguments of its own did not take them) and its value means something there."""
    for key, args_wanted in wanted.items():
        held = {a: enum_value(getattr(args, a, None)) for a in args_wanted}
        missed = {a: v for a, v in held.items() if v != enum_value(args_wanted[a])}
        shown = ", ".join(f"TrainingArguments.{a}={v!r}" for a, v in missed.items())
        port.applied.received(key, not missed, f"the Trainer holds {shown}, not what autotune gave it: your code did "
                                               "not train with the arguments autotune built")
        why = _missed(args, key)
        if why is not None:
            port.applied.cannot(key, why, chosen_only=True)


def _missed(args: TrainingArguments, key: str) -> str | None:
    """Why a setting the Trainer holds was not applied there (its value means nothing with the rest)."""
    if key in ("prefetch_factor", "persistent_workers") and not args.dataloader_num_workers:
        return "with num_workers 0 the DataLoader has no worker processes"
    if key == "compile_mode" and not args.torch_compile:
        return "compile is off"
    if key == "pin_memory" and args.use_cpu:
        return "the Trainer pins no memory for a CPU device"
    return None


def _record_recipe(port: TrialPort, args: TrainingArguments) -> None:
    """What the Trainer held for each mapped setting the trial did not choose: the user's recipe."""
    for key, a in HF.mapped.items():
        if not port.applied.chose(key) and a.held is not None:
            value = a.held(args)
            if value is not None:
                port.applied.left_to_recipe(key, value)


class AutotuneCallback(TrainerCallback):
    """The Trainer's loop, seen by the trial context: epochs, optimizer steps, evaluations (the stop rules)."""

    def __init__(self, port: TrialPort, wanted: Mapping[str, Mapping[str, Any]]) -> None:
        self.port = port
        self.wanted = wanted
        self.train_loss: float | None = None  # the epoch's logged loss
        self.epoch_samples = 0
        self.dataset_len = 0
        self.per_step = 1
        self.optimizer: Any = None  # the optimizer the Trainer stepped
        self.start: dict[str, Any] = {}  # what the Trainer built, for the context's first epoch (epoch_begin)

    def on_train_begin(self, args: TrainingArguments, state: Any, control: Any, **kw: Any) -> None:
        _not_held(self.port, args, self.wanted)
        _record_recipe(self.port, args)
        loader = kw.get("train_dataloader")
        self.dataset_len = len(loader.dataset) if loader is not None and hasattr(loader.dataset, "__len__") else 0
        self.per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
        steps = math.ceil(len(loader) / args.gradient_accumulation_steps) if loader is not None else 1
        self.optimizer = kw.get("optimizer")
        self.start = {"steps_per_epoch": steps, "epochs": state.num_train_epochs, "optimizer": self.optimizer,
                      "model": kw.get("model"), "compiled": bool(args.torch_compile)}

    def on_epoch_begin(self, args: TrainingArguments, state: Any, control: Any, **kw: Any) -> None:
        self.train_loss = None
        self.epoch_samples = 0
        if not self.port.epoch_begin(**self.start):  # (the first starts the context's epochs)
            control.should_training_stop = True

    def on_step_end(self, args: TrainingArguments, state: Any, control: Any, **kw: Any) -> None:
        left = self.dataset_len - self.epoch_samples if self.dataset_len else self.per_step
        n = max(1, min(self.per_step, left))
        self.epoch_samples += n
        self.port.step(n)

    def on_log(self, args: TrainingArguments, state: Any, control: Any, logs: Mapping[str, float] | None = None,
               **kw: Any) -> None:
        if logs and "loss" in logs and "eval_loss" not in logs:
            self.train_loss = float(logs["loss"])

    def on_evaluate(self, args: TrainingArguments, state: Any, control: Any,
                    metrics: Mapping[str, float] | None = None, **kw: Any) -> None:
        values = reported(metrics or {})
        if self.train_loss is not None:  # (a non-finite one: the stop rules end the trial, diverged)
            values["train_loss"] = self.train_loss
        shown = ", ".join(f"{k} (as {reported({k: 0.0}).popitem()[0]})" if k.startswith("eval_") else k
                          for k in sorted(metrics or {}) if k[5:] not in HF_SPEED_KEYS and k != "epoch")
        if self.port.report(values, logged=f"{shown}, loss (as train_loss)"):
            control.should_training_stop = True

    def on_train_end(self, args: TrainingArguments, state: Any, control: Any, **kw: Any) -> None:
        self.port.finish()


def reported(metrics: Mapping[str, float]) -> dict[str, float]:
    """An evaluation's metrics by autotune's names: `eval_X` -> `val_X` (its timings and the epoch left out)."""
    out = {}
    for name, value in metrics.items():
        if not name.startswith("eval_") or name[5:] in HF_SPEED_KEYS or not isinstance(value, (int, float)):
            continue
        out["val_" + name[5:]] = float(value)
    return out


def trainer_fit(trainer: Trainer | Callable[..., Trainer], **training_args: Any) -> Callable[[TrialContext], None]:
    """A training function (`trainer: module:fit` in the YAML) that tunes a Hugging Face Trainer.

    `trainer`: your `Trainer` (reused by every trial: its model's first weights restored, the trial's
    TrainingArguments given), or `make_trainer(args)` / `make_trainer(args, ctx)`, your code building a Trainer
    from the trial's TrainingArguments (and, if it likes, the trial's settings and `user.` parameters from ctx).
    `training_args`: with make_trainer, your own TrainingArguments (output_dir, say). Either way the settings the
    trial chose replace yours (`tables.HF`) and every other one stays yours."""
    if isinstance(trainer, Trainer):
        if training_args:
            raise TypeError("hf.trainer_fit(trainer): your Trainer holds its TrainingArguments already; give "
                            "keyword arguments only with a make_trainer function")
        fit = _ReusedTrainer(trainer)
        table = HF_OBJECT
    else:
        fit = _BuiltPerTrial(trainer, training_args)
        table = HF
    setattr(fit, ADAPTER, table)  # validation reads what the Trainer cannot apply, and its metric names
    setattr(fit, ONE_DEVICE, table.integration)  # (devices > 1: refused at validation)
    return fit


class _Fit:
    """A trial through the Trainer: arguments, optimizer, callback, training, what applied."""

    framework = FRAMEWORK
    table: Framework
    _given: set[str]

    def _train(self, port: TrialPort, trainer: Trainer, wanted: dict[str, dict[str, Any]]) -> None:
        record_cannot(port, self.table)
        removed = []
        if "disable_tqdm" not in self._given:  # autotune prints the trials' progress: not a line per log too
            removed = [c for c in (trainer.pop_callback(PrinterCallback), trainer.pop_callback(ProgressCallback)) if c]
        own = trainer.optimizer is not None or trainer.optimizer_cls_and_kwargs is not None
        for key in ("optimizer", "momentum", "lr", "weight_decay"):
            if own and port.applied.chose(key):
                port.applied.cannot(key, "your Trainer was given its own optimizer", chosen_only=True)
        if not own and port.applied.chose("optimizer"):
            trainer.optimizer_cls_and_kwargs = (_optimizer_factory(port, trainer), {})
        elif not own and port.applied.chose("momentum"):
            port.applied.cannot("momentum", f"the Trainer's own optimizer ({enum_value(trainer.args.optim)}) takes "
                                "no momentum from autotune: search optimizer too", chosen_only=True)
        callback = AutotuneCallback(port, wanted)
        trainer.add_callback(callback)
        # The Trainer caches its evaluation loaders when their workers persist: a trial evaluates on its own (not an
        # earlier trial's batch size), and its workers end with it (not left running in the host's process).
        held = compat.pop_eval_loaders(trainer)
        try:
            with quiet_frameworks():
                trainer.train()
        finally:  # (a stopped or failed trial records what shaped it too: `_effects` runs however train() ended)
            self._effects(port, trainer, callback.optimizer, own)
            handler = trainer.callback_handler  # (it keeps the loaders train() used last)
            compat.end_loader_workers([*(compat.pop_eval_loaders(trainer) or {}).values(),
                                       handler.train_dataloader, handler.eval_dataloader])
            if held is not None:
                compat.restore_eval_loaders(trainer, held)
            trainer.remove_callback(callback)
            for c in removed:  # (the user's Trainer object outlives the study: its callbacks as they were)
                trainer.add_callback(c)

    @staticmethod
    def _effects(port: TrialPort, trainer: Trainer, stepped: Any, own: bool) -> None:
        """The optimizer settings and lr_schedule that shaped training: the Trainer's own optimizer (unchosen
        `optimizer`) stepped at the chosen lr and weight_decay it holds; its scheduler stepped the schedule asked."""
        args = trainer.args
        if not trainer.state.global_step or own:
            return
        if not port.applied.chose("optimizer"):
            for key, held in (("lr", args.learning_rate), ("weight_decay", args.weight_decay)):
                if port.applied.chose(key) and math.isclose(float(held), float(port.plan.settings[key])):
                    port.applied.applied(key)
        if port.applied.chose("lr_schedule") and not port.applied.refused("lr_schedule"):
            port.applied.applied("lr_schedule")  # the Trainer's scheduler stepped the schedule asked for

    def _yours(self, port: TrialPort, table: Framework) -> None:
        """Settings the user's code applies (by reading ctx.settings) that nothing read: not applied."""
        for key in port.applied.unread_choices():
            role, how = table.role(key) if not key.startswith("user.") else ("", "")
            if role == "yours":
                port.applied.cannot(key, how, chosen_only=True)


class _BuiltPerTrial(_Fit):
    """make_trainer(args[, ctx]) builds the trial's Trainer."""

    table = HF

    def __init__(self, make_trainer: Callable[..., Trainer], training_args: Mapping[str, Any]) -> None:
        self.make_trainer = make_trainer
        self.training_args = dict(training_args)
        self._given = set(training_args)
        self.takes_ctx = _takes_ctx(make_trainer)
        self.__name__ = self.__qualname__ = getattr(make_trainer, "__name__", "fit")
        self.__module__ = getattr(make_trainer, "__module__", __name__)

    def __call__(self, ctx: TrialContext) -> None:
        refuse_devices(ctx, "Hugging Face")
        port = TrialPort(ctx, FRAMEWORK)
        base = TrainingArguments(**self.training_args)
        args, wanted = trial_arguments(port, base, self._given)
        trainer = self.make_trainer(args, ctx) if self.takes_ctx else self.make_trainer(args)
        if not isinstance(trainer, Trainer):
            raise ContextMisuse(f"make_trainer returned {type(trainer).__name__}, not a transformers.Trainer")
        port.fresh(trainer.model, "make_trainer's Trainer")
        try:
            self._train(port, trainer, wanted)
        finally:  # (a stopped or failed trial's record says the same)
            self._yours(port, self.table)


class _ReusedTrainer(_Fit):
    """The user's Trainer object, reused by every trial: the trial's TrainingArguments given to it, its model's
    first weights restored, a fresh optimizer built (the Trainer's own hyper-parameter search does the same)."""

    table = HF_OBJECT

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        # the user's arguments, as they were (a copy, not a new TrainingArguments: building one resets accelerate's
        # state, which the user's Trainer holds until a trial gives it arguments of its own)
        self.base = copy.deepcopy(trainer.args)
        self._given = _given(self.base)
        self.first: dict[str, torch.Tensor] | None = None  # the model's weights when the first trial began
        self.__name__ = self.__qualname__ = "fit"
        self.__module__ = type(trainer).__module__

    def __call__(self, ctx: TrialContext) -> None:
        refuse_devices(ctx, "Hugging Face")
        port = TrialPort(ctx, FRAMEWORK)
        trainer = self.trainer
        if trainer.optimizer is not None or trainer.lr_scheduler is not None:
            raise ConfigError(port.plan.config_file, "trainer",
                              "your Trainer was given an optimizer or scheduler object (optimizers=): every trial "
                              "would go on with its state; give optimizer_cls_and_kwargs= instead, or leave it to "
                              "the Trainer")
        self._fresh_model(port)
        args, wanted = trial_arguments(port, self.base, self._given)
        self._set_arguments(args)
        try:
            self._train(port, trainer, wanted)
        finally:
            trainer.optimizer, trainer.lr_scheduler = None, None  # the next trial builds its own
            # the Trainer outlives the study (a notebook trains it after): the user's arguments again, built anew
            # (accelerate's state is set by the newest TrainingArguments built)
            self._set_arguments(dataclasses.replace(self.base))
            self._yours(port, self.table)  # (a stopped or failed trial's record says the same)

    def _fresh_model(self, port: TrialPort) -> None:
        """The model starts every trial from the weights it had when the first trial began."""
        model = self.trainer.model
        if self.first is None:
            self.first = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        else:
            model.load_state_dict(self.first)
        port.fresh(model, restored=True)

    def _set_arguments(self, args: TrainingArguments) -> None:
        """The Trainer takes the trial's TrainingArguments: what its constructor derived from them is derived
        again (the accelerator and its precision, the label smoother, the model's device, the batch size)."""
        from transformers.trainer_pt_utils import LabelSmoother

        t = self.trainer
        t.args = args
        compat.set_train_batch_size(t, args.train_batch_size)
        t.create_accelerator_and_postprocess()
        t.label_smoother = LabelSmoother(epsilon=args.label_smoothing_factor) if args.label_smoothing_factor else None
        if t.place_model_on_device:
            compat.move_model_to_device(t, t.model, args.device)
        t.model_wrapped = t.model


def _optimizer_factory(port: TrialPort, trainer: Trainer) -> Callable[[], Callable[..., Any]]:
    """autotune's optimizer over the Trainer's groups (weight_decay on its decayed weights; biases and LayerNorm
    at 0), at the Trainer's learning_rate and weight_decay (the chosen ones, else the user's), in the shape the
    Trainer calls an optimizer factory: factory()(model)."""
    def factory() -> Callable[..., Any]:
        def build(model: Any, **_: Any) -> Any:
            args = trainer.args
            decay = set(trainer.get_decay_parameter_names(model))
            wd = float(args.weight_decay)
            trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
            groups = [{"params": [p for n, p in trained if n in decay], "weight_decay": wd},
                      {"params": [p for n, p in trained if n not in decay], "weight_decay": 0.0}]
            build_opt = port.optimizer_factory(lr=float(args.learning_rate), weight_decay=wd)
            return build_opt([g for g in groups if g["params"]])
        return build
    return factory


def _takes_ctx(fn: Callable[..., Any]) -> bool:
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    return len(params) >= 2


__all__ = ["AutotuneCallback", "HF", "reported", "trainer_fit", "trial_arguments"]
