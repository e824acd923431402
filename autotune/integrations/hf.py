"""Tune a Hugging Face `Trainer` as it is: autotune builds its `TrainingArguments` from the trial's settings
(`MAPPED`: one row per setting), gives it autotune's optimizer, and adds a `TrainerCallback` that keeps the trial
context's clocks and stop rules.

    from autotune.integrations import hf

    def make_trainer(args, ctx):                  # your code, given the trial's TrainingArguments (ctx optional)
        return Trainer(model=MyModel(), args=args, train_dataset=train, eval_dataset=val, compute_metrics=acc)

    fit = hf.trainer_fit(make_trainer, output_dir="runs/hf")   # `trainer: my_script:fit`; your other arguments

Each epoch is evaluated and logged (`eval_strategy` and `logging_strategy` "epoch"); `eval_X` metrics are
reported as `val_X` (`eval_loss` is `val_loss`), the epoch's logged `loss` as `train_loss`. An epoch's training
clock runs from the Trainer's epoch start to its last optimizer step: evaluation, logging and checkpoint saving
(`save_strategy` "no" unless given; "steps" becomes "epoch") are not training. A stop (divergence, slow,
dominated, the pruner) raises out of `trainer.train()` and the trial ends PRUNED with its reason. One device per
trial (`devices: 1`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

from autotune.core import ONE_DEVICE
from autotune.integrations.common import FrameworkLoop, record_not_applicable, record_received, require
from autotune.training import ContextMisuse, TrialContext

require("transformers", "hf", "Hugging Face")
require("accelerate", "hf", "Hugging Face")

from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

SCHEDULES = {"constant": "constant", "cosine": "cosine"}  # autotune lr_schedule -> lr_scheduler_type
OPTIMIZER_ARG = "optimizer_cls_and_kwargs"  # the Trainer's: autotune's optimizer factory builds its optimizer


def _precision(v: str, ctx: TrialContext) -> dict[str, Any]:
    return {"bf16": v == "bf16", "fp16": v == "fp16"}


def _loader(field_name: str) -> Callable[[Any, TrialContext], dict[str, Any]]:
    """A DataLoader option: only with worker processes (the Trainer refuses them, or torch does, without)."""
    def to_args(v: Any, ctx: TrialContext) -> dict[str, Any]:
        workers = int(ctx.settings.num_workers)
        off = None if field_name == "dataloader_prefetch_factor" else False
        return {field_name: v if workers > 0 else off}
    return to_args


def _arg(field_name: str, cast: Callable[[Any], Any] = lambda v: v) -> Callable[[Any, TrialContext], dict[str, Any]]:
    return lambda v, ctx: {field_name: cast(v)}


# autotune setting -> the TrainingArguments it becomes (a function of the value and the context). The optimizer's
# settings go to the Trainer as autotune's optimizer (the one every trainer builds: fused kernels where torch has
# them), so each optimizer is the same across trainers; weight_decay also sets the Trainer's groups (decayed
# weights; biases and LayerNorm at 0, the Trainer's rule).
MAPPED: dict[str, Callable[[Any, TrialContext], dict[str, Any]]] = {
    "lr": _arg("learning_rate", float),
    "optimizer": lambda v, ctx: {},
    "momentum": lambda v, ctx: {},
    "weight_decay": _arg("weight_decay", float),
    "batch_size": _arg("per_device_train_batch_size", int),
    "epochs": _arg("num_train_epochs", float),
    "lr_schedule": lambda v, ctx: {"lr_scheduler_type": SCHEDULES.get(v, "constant")},
    "label_smoothing": _arg("label_smoothing_factor", float),
    "grad_accum_steps": _arg("gradient_accumulation_steps", int),
    "grad_clip": _arg("max_grad_norm", float),
    "precision": _precision,
    "compile": _arg("torch_compile", bool),
    "compile_mode": lambda v, ctx: {"torch_compile_mode": v if ctx.settings.compile else None},
    "num_workers": _arg("dataloader_num_workers", int),
    "pin_memory": _arg("dataloader_pin_memory", bool),
    "prefetch_factor": _loader("dataloader_prefetch_factor"),
    "persistent_workers": _loader("dataloader_persistent_workers"),
    "eval_batch_size": _arg("per_device_eval_batch_size", int),
}
# Settings your own code applies (read them through ctx.settings in make_trainer): applied when read.
YOURS = {
    "dropout": "the model is yours: read ctx.settings.dropout in make_trainer to search it",
    "init": "the model is yours: the Trainer keeps its weights (read ctx.settings.init to search it)",
    "data_fraction": "the Trainer trains on your whole train_dataset (subset it by ctx.settings.data_fraction)",
    "aug_crop_padding": "the augmentation is yours", "aug_flip": "the augmentation is yours",
    "aug_cutout": "the augmentation is yours",
}
NOT_APPLICABLE = {
    "channels_last": "the Trainer keeps the model's memory format (no channels_last)",
    "data_on_device": "the Trainer batches through its own DataLoader (no device-resident data)",
}
OPTIMIZER_KEYS = ("optimizer", "momentum")  # applied by their effect: autotune's optimizer stepped


def training_arguments(ctx: TrialContext, user_args: Mapping[str, Any]
                       ) -> tuple[TrainingArguments, dict[str, dict[str, Any]]]:
    """The trial's TrainingArguments: the user's own, then the mapped settings, then what autotune's clocks need;
    and setting -> {argument: value} for the arguments each setting decided."""
    wanted = {key: to_args(ctx.settings[key], ctx) for key, to_args in MAPPED.items()}
    mapped = {arg: value for args in wanted.values() for arg, value in args.items()}
    kwargs = {"report_to": "none", "disable_tqdm": True, **user_args, **mapped,
              "eval_strategy": "epoch", "logging_strategy": "epoch", "seed": ctx.seed,
              "use_cpu": ctx.device.type == "cpu"}
    # a checkpoint saved mid-epoch would be inside the training clock: "steps" saves each epoch instead, and the
    # Trainer's default (every 500 steps) saves nothing
    if "save_strategy" not in user_args:
        kwargs["save_strategy"] = "no"
    elif str(user_args["save_strategy"]) == "steps":
        kwargs["save_strategy"] = "epoch"
    return TrainingArguments(**kwargs), wanted


def _missed(ctx: TrialContext, key: str) -> str | None:
    """Why a mapped setting was not applied although the Trainer holds it (the value means nothing there)."""
    s = ctx.settings
    if key == "lr_schedule" and s.lr_schedule not in SCHEDULES:
        return f"the Trainer has no {s.lr_schedule} schedule (lr_scheduler_type: {', '.join(SCHEDULES)})"
    if key in ("prefetch_factor", "persistent_workers") and s.num_workers == 0:
        return "with num_workers 0 the DataLoader has no worker processes"
    if key == "compile_mode" and not s.compile:
        return "compile is off"
    if key == "pin_memory" and ctx.device.type == "cpu":
        return "the Trainer pins no memory for a CPU device"
    return None


class AutotuneCallback(TrainerCallback):
    """The Trainer's loop, seen by the trial context: epochs, optimizer steps, evaluations (the stop rules)."""

    def __init__(self, ctx: TrialContext, wanted: Mapping[str, Mapping[str, Any]]) -> None:
        self.loop = FrameworkLoop(ctx)
        self.wanted = wanted
        self.train_loss: float | None = None  # the epoch's logged loss
        self.epoch_samples = 0
        self.dataset_len = 0
        self.per_step = 1

    def on_train_begin(self, args: TrainingArguments, state: Any, control: Any, **kw: Any) -> None:
        ctx = self.loop.ctx
        record_received(ctx, self.wanted, args, "TrainingArguments")
        for key in self.wanted:
            why = _missed(ctx, key)
            if why is not None and key in ctx.state.chosen:
                ctx.state.not_applied[key] = why
                ctx.state.reads.discard(key)
        loader = kw.get("train_dataloader")
        self.dataset_len = len(loader.dataset) if loader is not None and hasattr(loader.dataset, "__len__") else 0
        self.per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
        steps = math.ceil(len(loader) / args.gradient_accumulation_steps) if loader is not None else 1
        self.loop.start(steps, kw.get("optimizer"), kw.get("model"), bool(args.torch_compile))

    def on_epoch_begin(self, args: TrainingArguments, state: Any, control: Any, **kw: Any) -> None:
        self.train_loss = None
        self.epoch_samples = 0
        if not self.loop.epoch_begin():
            control.should_training_stop = True

    def on_step_end(self, args: TrainingArguments, state: Any, control: Any, **kw: Any) -> None:
        left = self.dataset_len - self.epoch_samples if self.dataset_len else self.per_step
        n = max(1, min(self.per_step, left))
        self.epoch_samples += n
        self.loop.step(n)

    def on_log(self, args: TrainingArguments, state: Any, control: Any, logs: Mapping[str, float] | None = None,
               **kw: Any) -> None:
        if logs and "loss" in logs and "eval_loss" not in logs:
            self.train_loss = float(logs["loss"])

    def on_evaluate(self, args: TrainingArguments, state: Any, control: Any,
                    metrics: Mapping[str, float] | None = None, **kw: Any) -> None:
        values = reported(metrics or {})
        if self.train_loss is not None:  # (a non-finite one: the stop rules end the trial, diverged)
            values["train_loss"] = self.train_loss
        if self.loop.report(values):
            control.should_training_stop = True

    def on_train_end(self, args: TrainingArguments, state: Any, control: Any, **kw: Any) -> None:
        self.loop.finish()


SPEED_KEYS = ("runtime", "samples_per_second", "steps_per_second")


def reported(metrics: Mapping[str, float]) -> dict[str, float]:
    """An evaluation's metrics by autotune's names: `eval_X` -> `val_X` (its timings and the epoch left out)."""
    out = {}
    for name, value in metrics.items():
        if not name.startswith("eval_") or name[5:] in SPEED_KEYS or not isinstance(value, (int, float)):
            continue
        out["val_" + name[5:]] = float(value)
    return out


def trainer_fit(make_trainer: Callable[..., Trainer], **training_args: Any) -> Callable[[TrialContext], None]:
    """A training function (`trainer: module:fit` in the YAML) that tunes the Trainer `make_trainer` builds.

    `make_trainer(args)` or `make_trainer(args, ctx)`: your code, building your Trainer from the trial's
    TrainingArguments (and, if it likes, the trial's settings and `user.` parameters from ctx). `training_args`:
    your own TrainingArguments (output_dir, say); the searched settings replace theirs (`MAPPED`)."""
    takes_ctx = _takes_ctx(make_trainer)

    def fit(ctx: TrialContext) -> None:
        if ctx.world_size > 1:  # (validation refuses devices > 1 for this fit: reached only through other code)
            raise ContextMisuse("the Hugging Face integration trains a trial on one device: set devices: 1")
        record_not_applicable(ctx, NOT_APPLICABLE)
        args, wanted = training_arguments(ctx, training_args)
        trainer = make_trainer(args, ctx) if takes_ctx else make_trainer(args)
        if "disable_tqdm" not in training_args:  # autotune prints the trials' progress: not a line per log too
            trainer.remove_callback(PrinterCallback)
        own = trainer.optimizer is not None or trainer.optimizer_cls_and_kwargs is not None
        if own:
            for key in set(OPTIMIZER_KEYS + ("lr", "weight_decay")) & ctx.state.chosen:
                ctx.state.not_applied[key] = "your Trainer was given its own optimizer"
        else:
            trainer.optimizer_cls_and_kwargs = (_optimizer_factory(ctx, trainer), {})
        trainer.add_callback(AutotuneCallback(ctx, wanted))
        trainer.train()
        st = ctx.state
        if not own and st.stepper.opt_steps and "lr_schedule" not in st.not_applied and \
                trainer.args.lr_scheduler_type == SCHEDULES.get(ctx.settings.lr_schedule):
            st.effects.add("lr_schedule")  # the Trainer's scheduler stepped the schedule asked for
        for key in set(YOURS) & st.chosen - st.reads:
            st.not_applied.setdefault(key, YOURS[key])

    fit.__qualname__ = fit.__name__ = getattr(make_trainer, "__name__", "fit")
    fit.autotune_searched_optimizer = True  # type: ignore[attr-defined]  # (a searched lr is the learning rate)
    setattr(fit, ONE_DEVICE, "the Hugging Face integration")  # (devices > 1: refused at validation)
    return fit


def _optimizer_factory(ctx: TrialContext, trainer: Trainer) -> Callable[[], Callable[..., Any]]:
    """autotune's optimizer over the Trainer's groups (weight_decay on its decayed weights; biases and LayerNorm
    at 0), in the shape the Trainer calls an optimizer factory: factory()(model)."""
    def factory() -> Callable[..., Any]:
        def build(model: Any, **_: Any) -> Any:
            decay = set(trainer.get_decay_parameter_names(model))
            wd = float(trainer.args.weight_decay)
            trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
            groups = [{"params": [p for n, p in trained if n in decay], "weight_decay": wd},
                      {"params": [p for n, p in trained if n not in decay], "weight_decay": 0.0}]
            return ctx.optimizer_factory([g for g in groups if g["params"]])
        return build
    return factory


def _takes_ctx(fn: Callable[..., Any]) -> bool:
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    return len(params) >= 2


__all__ = ["MAPPED", "NOT_APPLICABLE", "YOURS", "AutotuneCallback", "reported", "trainer_fit",
           "training_arguments"]
