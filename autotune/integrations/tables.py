"""What a framework does with each setting of the catalogue: one mapping per framework, the rest derived from the
catalogue's `applied_by`. Pure data (no framework is imported), so validation, the adapters and the how-to pages'
tables (docs/hooks/reference.py) read the same source.

A setting is, for a framework, one of:
- `mapped`: onto the framework's own argument (`Arg`: the arguments a value becomes, and the value the framework
  holds when the trial leaves the setting to the user's recipe);
- `context`: applied by the trial context whatever trains (applied_by around, stop, clock);
- `part`: applied by a part of the context the adapter goes through (Lightning's module goes through ctx.prepare);
- `yours`: the user's own code applies it by reading `ctx.settings` (the loss, the model, the augmentation);
- `builtin`: the built-in trainer's own steps (compression, checkpoints): refused for every training function;
- `cannot`: the framework cannot apply it: refused at validation when a trial would choose it.

A setting the trial does not choose (neither searched nor fixed in `train:`) is the user's recipe: the framework
keeps the user's code's value or its own default, and the trial records what it held.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from autotune.spec import BUILTIN_ONLY, SETTINGS, is_quality
from autotune.training import BY_CONTEXT

YOURS_PARTS = ("loss", "model", "augment")  # the built-in trainer's; a training function's own code reads them
CONTEXT_TEXT = "applied by the trial context around the training, as for any training function"
BUILTIN_TEXT = "the built-in trainer's steps after training: refused at validation for every training function"


@dataclass(frozen=True)
class Arg:
    """A setting mapped onto a framework's own argument(s). `to(value, base)`: the arguments a chosen value becomes
    (`base`: the user's own arguments, for a value that depends on them); `held(obj)`: what the framework holds for
    it when the trial leaves it to the recipe; `doc`: what it becomes, for the how-to page."""

    to: Callable[[Any, Any], dict[str, Any]]
    held: Callable[[Any], Any]
    doc: str
    on: str = "args"  # which of the framework's objects takes it (the adapter's own word: args, loader, optimizer)


def arg(name: str, cast: Callable[[Any], Any] = lambda v: v, doc: str = "", on: str = "args") -> Arg:
    """A setting that becomes one argument of the same meaning."""
    return Arg(to=lambda v, base: {name: cast(v)}, held=lambda obj: getattr(obj, name, None), doc=doc or f"`{name}`",
               on=on)


@dataclass(frozen=True)
class Framework:
    """One framework's table: its mapping, how it takes the catalogue's parts, what it cannot apply (and why)."""

    name: str  # "Hugging Face": the integration's name in messages
    mapped: Mapping[str, Arg]
    parts: Mapping[str, str] = field(default_factory=dict)  # applied_by -> how the adapter applies such settings
    yours: Mapping[str, str] = field(default_factory=dict)  # extra settings the user's code applies, and how
    cannot: Mapping[str, str] = field(default_factory=dict)  # settings it cannot apply: why (others: `unmapped`)
    # a setting it cannot apply -> the value that says what the framework does anyway (channels_last false): allowed
    inherent: Mapping[str, Any] = field(default_factory=dict)
    values: Mapping[str, Mapping[Any, str]] = field(default_factory=dict)  # setting -> {value it cannot take: why}
    # setting -> (the setting it acts through, why): applied only when that one is chosen too (HF's momentum is the
    # searched optimizer's; the Trainer's own optim takes none)
    needs: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    unmapped: str = "it has no argument for it"
    user_code: bool = True  # the user's code runs each trial (can read ctx.settings): `yours` settings can apply
    metric_rule: Callable[[str], str | None] = lambda metric: None  # why an objective cannot be reported, or None
    lr_is_rate: bool = True  # a chosen lr is the learning rate (False: it multiplies the user's own optimizer's
    # group lrs unless `optimizer` is chosen too)

    @property
    def integration(self) -> str:
        return f"the {self.name} integration"

    def role(self, key: str) -> tuple[str, str]:
        """(role, how): what the framework does with `key` (see the module's docstring)."""
        if key in self.mapped:
            return "mapped", self.mapped[key].doc
        part = SETTINGS[key].applied_by
        if key in BUILTIN_ONLY:
            return "builtin", BUILTIN_TEXT
        if key in BY_CONTEXT:
            return "context", CONTEXT_TEXT
        if key in self.cannot:
            return "cannot", self.cannot[key]
        if key in self.yours or part in YOURS_PARTS:
            if not self.user_code:
                return "cannot", ("nothing of yours runs per trial to read it (build the trainer in a function of "
                                  "(args, ctx) to read ctx.settings)")
            return "yours", self.yours.get(key, "yours: your code reads it from ctx.settings (applied when read)")
        if part in self.parts:
            return "part", self.parts[part]
        return "cannot", self.unmapped

    def refusal(self, key: str, values: Iterable[Any] | None, chosen: Iterable[str] = ()) -> str | None:
        """Why a trial choosing `key` (fixed, or searched over `values`; None: a range; `chosen`: every setting the
        study chooses) cannot apply it, else None."""
        if key in self.needs and self.needs[key][0] not in chosen:
            other, why = self.needs[key]
            return f"{self.integration} cannot apply {key} unless {other} is chosen too: {why}"
        role, why = self.role(key)
        if role == "cannot" and (values is None or any(v != self.inherent.get(key, object()) for v in values)):
            return f"{self.integration} cannot apply {key}: {why}; drop the key (your code's own value stays)"
        bad = [v for v in values or () if v in self.values.get(key, {})]
        if bad:
            return f"{self.integration} cannot apply {key} {bad[0]}: {self.values[key][bad[0]]}"
        return None

    def metric_refusal(self, metric: str) -> str | None:
        """Why an objective or metric named `metric` can never be reported by this framework, else None."""
        return self.metric_rule(metric)

    def rows(self) -> list[tuple[list[str], str, str]]:
        """The how-to page's table: ([settings], role, how), the catalogue's order, one row per mapping and per
        shared treatment."""
        grouped: dict[tuple[str, str], list[str]] = {}
        for key in SETTINGS:
            role, how = self.role(key)
            grouped.setdefault((role, how), []).append(key)
        order = ["mapped", "part", "yours", "context", "cannot", "builtin"]
        return [(keys, role, how) for (role, how), keys in sorted(grouped.items(), key=lambda kv: (
            order.index(kv[0][0]), list(SETTINGS).index(kv[1][0])))]

    def table(self) -> str:
        """The how-to page's table as Markdown (generated at build time: docs/hooks/reference.py)."""
        label = {"mapped": "", "part": "", "yours": "", "context": "", "cannot": "cannot apply: ",
                 "builtin": ""}
        lines = ["| autotune setting | " + self.name + " |", "|---|---|"]
        for keys, role, how in self.rows():
            shown = ", ".join(f"`{k}`" for k in keys)
            lines.append(f"| {shown} | {label[role]}{how.replace('|', chr(92) + '|')} |")
        return "\n".join(lines) + "\n"


def uncovered(fw: Framework) -> list[str]:
    """Settings a framework's own rows name that the catalogue lacks (a test keeps it empty)."""
    named = [*fw.mapped, *fw.cannot, *fw.yours, *fw.values, *fw.needs, *(k for k, _ in fw.needs.values())]
    return sorted(set(named) - set(SETTINGS))


def through_optimizer(own: str, *keys: str) -> dict[str, tuple[str, str]]:
    """The `needs` rule every framework shares: a setting of autotune's optimizer (momentum, weight_decay) that the
    framework's own optimizer (`own`, what trains unless `optimizer` is chosen) takes nothing of is applied only with
    `optimizer` chosen too, else refused at validation saying what to add."""
    names = {"momentum": "sgd, sgd_nesterov or rmsprop"}
    return {key: ("optimizer", f"{own} takes no {key} from autotune; search or fix optimizer too (add it to space: "
                               f"or train:, e.g. {names.get(key, 'adamw')})") for key in keys}


# ---------------------------------------------------------------- Hugging Face Trainer

HF_SPEED_KEYS = ("runtime", "samples_per_second", "steps_per_second")


def hf_metric(metric: str) -> str | None:
    """The Trainer reports its evaluation's `eval_X` as `val_X` (eval_loss: val_loss) and its logged loss as
    train_loss: a reported objective of another name is never there."""
    if not is_quality(metric):
        return None  # measured by autotune (a clock, a size)
    if metric == "train_loss" or (metric.startswith("val_") and metric[4:] not in HF_SPEED_KEYS):
        return None
    want = f"val_{metric[5:]}" if metric.startswith("eval_") else f"val_{metric}"
    return (f"the Hugging Face Trainer never reports {metric}: its evaluation's eval_X is stored as val_X (eval_loss "
            f"is val_loss, your compute_metrics' 'accuracy' is val_accuracy) and its logged loss as train_loss; "
            f"did you mean {want}?")


def _precision_held(args: Any) -> str:
    return "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else "fp32"


def _schedule_to(value: str, base: Any) -> dict[str, Any]:
    """constant or cosine; with the user's warmup (warmup_ratio / warmup_steps) kept: constant_with_warmup."""
    warm = bool(getattr(base, "warmup_steps", 0) or getattr(base, "warmup_ratio", 0))  # (ratio: older releases)
    return {"lr_scheduler_type": "constant_with_warmup" if value == "constant" and warm else value}


def _workers_only(name: str, off: Any) -> Callable[[Any, Any], dict[str, Any]]:
    """A DataLoader option that only worker processes take (the Trainer or torch refuse it without)."""
    return lambda v, base: {name: v if int(getattr(base, "dataloader_num_workers", 0) or 0) > 0 else off}


def enum_value(obj: Any) -> Any:
    """An enum's value (TrainingArguments' lr_scheduler_type, optim, save_strategy), else the object."""
    return getattr(obj, "value", obj)


HF = Framework(
    name="Hugging Face",
    mapped={
        "lr": arg("learning_rate", float, "`learning_rate`: the Trainer's optimizer (yours, or the searched one)"),
        "optimizer": Arg(to=lambda v, base: {}, held=lambda a: f"{enum_value(a.optim)} (the Trainer's optim)",
                         doc="autotune's optimizer (the one every trainer builds), given to the Trainer as "
                             "`optimizer_cls_and_kwargs`, at `learning_rate` and `weight_decay`; unchosen: the "
                             "Trainer's own `optim`", on="optimizer"),
        "momentum": Arg(to=lambda v, base: {}, held=lambda a: None,
                        doc="the searched optimizer's momentum (sgd, sgd_nesterov, rmsprop): refused unless "
                            "`optimizer` is chosen too", on="optimizer"),
        "weight_decay": arg("weight_decay", float, "`weight_decay`: the Trainer's decayed weights (biases and "
                                                   "LayerNorm at 0)"),
        "batch_size": arg("per_device_train_batch_size", int),
        "eval_batch_size": arg("per_device_eval_batch_size", int),
        "epochs": Arg(to=lambda v, base: {"num_train_epochs": float(v), "max_steps": -1},
                      held=lambda a: a.num_train_epochs, doc="`num_train_epochs` (your `max_steps` then off)"),
        "lr_schedule": Arg(to=_schedule_to, held=lambda a: enum_value(a.lr_scheduler_type),
                           doc="`lr_scheduler_type`: constant (constant_with_warmup when you set a warmup) or cosine; "
                               "your warmup stays"),
        "label_smoothing": arg("label_smoothing_factor", float),
        "grad_accum_steps": arg("gradient_accumulation_steps", int),
        "grad_clip": arg("max_grad_norm", float, "`max_grad_norm` (0: none)"),
        "precision": Arg(to=lambda v, base: {"bf16": v == "bf16", "fp16": v == "fp16"}, held=_precision_held,
                         doc="`bf16` / `fp16`"),
        "compile": arg("torch_compile", bool),
        "compile_mode": Arg(to=lambda v, base: {"torch_compile_mode": v}, held=lambda a: a.torch_compile_mode,
                            doc="`torch_compile_mode`"),
        "num_workers": arg("dataloader_num_workers", int),
        "pin_memory": arg("dataloader_pin_memory", bool, "`dataloader_pin_memory` (not on a CPU)"),
        "prefetch_factor": Arg(to=_workers_only("dataloader_prefetch_factor", None),
                               held=lambda a: a.dataloader_prefetch_factor,
                               doc="`dataloader_prefetch_factor` (with worker processes)"),
        "persistent_workers": Arg(to=_workers_only("dataloader_persistent_workers", False),
                                  held=lambda a: a.dataloader_persistent_workers,
                                  doc="`dataloader_persistent_workers` (with worker processes)"),
    },
    yours={
        "init": "yours: the Trainer keeps your model's weights (read ctx.settings.init in make_trainer)",
        "data_fraction": "yours: the Trainer trains on your whole train_dataset (subset it by "
                         "ctx.settings.data_fraction in make_trainer)",
    },
    cannot={
        "channels_last": "the Trainer keeps the model's memory format",
        "data_on_device": "the Trainer batches through its own DataLoader",
    },
    inherent={"channels_last": False, "data_on_device": False},
    values={"lr_schedule": {"onecycle": "the Trainer has no one-cycle schedule (lr_scheduler_type: use constant or "
                                        "cosine)"}},
    needs=through_optimizer("the Trainer's own optim", "momentum"),  # (its weight_decay is the Trainer's argument)
    unmapped="the Trainer has no argument for it",
    metric_rule=hf_metric,
)
# The same Trainer given as an object (hf.trainer_fit(trainer)): no code of the user's runs per trial.
HF_OBJECT = replace(HF, user_code=False)


# ---------------------------------------------------------------- Lightning

LIGHTNING_PRECISIONS = {"fp32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}
_LIGHTNING_PRECISION = {v: k for k, v in LIGHTNING_PRECISIONS.items()}


def _trainer_arg(name: str, to: Callable[[Any], Any], held: Callable[[Any], Any] = lambda v: v,
                 doc: str = "") -> Arg:
    """A Lightning Trainer argument: `to` the setting's value -> the argument's; `held` the built Trainer's -> the
    setting's (as the recipe shows it)."""
    return Arg(to=lambda v, base: {name: to(v)}, held=lambda t: held(getattr(t, name, None)),
               doc=doc or f"`Trainer({name}=)`", on="trainer")


LIGHTNING = Framework(
    name="Lightning",
    mapped={
        "precision": _trainer_arg("precision", LIGHTNING_PRECISIONS.__getitem__,
                                  lambda p: _LIGHTNING_PRECISION.get(str(p), p),
                                  "`Trainer(precision=)`: fp32 `32-true`, bf16 `bf16-mixed`, fp16 `16-mixed`"),
        "grad_accum_steps": _trainer_arg("accumulate_grad_batches", int),
        "grad_clip": _trainer_arg("gradient_clip_val", lambda v: float(v) if v > 0 else None,
                                  lambda v: float(v or 0.0), "`Trainer(gradient_clip_val=)` (0: none)"),
        "cudnn_benchmark": _trainer_arg("benchmark", bool),
        "epochs": _trainer_arg("max_epochs", int),
        "batch_size": arg("batch_size", int, "the training DataLoader's `batch_size`", on="train_loader"),
        "data_fraction": Arg(to=lambda v, base: {}, held=lambda loader: 1.0,
                             doc="a seeded random share of the training dataset", on="train_loader"),
        "num_workers": arg("num_workers", int, "the training DataLoader's `num_workers`", on="train_loader"),
        "pin_memory": arg("pin_memory", bool, "the training DataLoader's `pin_memory`", on="train_loader"),
        "prefetch_factor": arg("prefetch_factor", int, "the training DataLoader's `prefetch_factor` (with workers)",
                               on="train_loader"),
        "persistent_workers": arg("persistent_workers", bool, "the training DataLoader's `persistent_workers` (with "
                                                              "workers)", on="train_loader"),
        "eval_batch_size": arg("batch_size", int, "the validation DataLoader's `batch_size`", on="val_loader"),
    },
    parts={
        "optimizer": "`configure_optimizers` returns autotune's optimizer when `optimizer` is chosen (at your "
                     "optimizer's lr, momentum and weight_decay unless chosen), else yours, its group lrs "
                     "multiplied by a chosen `lr`",
        "schedule": "a scheduler from `configure_optimizers`, stepped after every optimizer step (unchosen: "
                    "your configure_optimizers' own)",
        "prepare": "`ctx.prepare(module)`; `trainer.fit` gets the compiled module",
    },
    cannot={"data_on_device": "Lightning's loop moves each batch to the device itself"},
    inherent={"data_on_device": False},
    needs=through_optimizer("your module's own optimizer (configure_optimizers)", "momentum", "weight_decay"),
    unmapped="Lightning's Trainer has no argument for it",
    lr_is_rate=False,
)

FRAMEWORKS = {"hf": HF, "lightning": LIGHTNING}

__all__ = ["Arg", "FRAMEWORKS", "Framework", "HF", "HF_OBJECT", "LIGHTNING", "LIGHTNING_PRECISIONS",
           "arg", "enum_value", "hf_metric", "through_optimizer", "uncovered"]
