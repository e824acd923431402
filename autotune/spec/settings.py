"""The catalogue of trainer settings: every key allowed in `train:` and `space:`.

One table, so the config validator, the search space, the trainer and the generated reference page
(docs/hooks/reference.py) agree on names, types, defaults and allowed values; and each row says how the setting
acts (`acts`: what the speed probe measures per value, what probe_then_tune may fix to its fastest value) and what
applies it (`applied_by`: which part of the trial context, or of the built-in trainer). The speed probe's
`THROUGHPUT`, the strategy's `NEUTRAL`/`EXACTNESS` and the trial context's applied-key groups are read from here
(`acting`, `applied_by`): a new setting is one row here and the code that applies it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from autotune.core import ConfigError, one_of, shown, suggest
from autotune.spec.names import (
    FREEZER_NAMES,
    INIT_NAMES,
    OPTIMIZER_NAMES,
    PRUNE_METHOD_NAMES,
    QUANTIZER_NAMES,
    SCHEDULE_NAMES,
)
from autotune.spec.settings_fields import SettingsFields

PRECISIONS = ("fp32", "fp16", "bf16")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
MATMUL_PRECISIONS = ("highest", "high", "medium")

# How a setting acts: `acts` of a row.
ACTS: dict[str, str] = {
    "result": "what a trial computes or measures, not how fast a training step runs: the speed probe shares one "
              "measurement across its values",
    "speed": "how fast a training step runs, never the numbers computed: the probe measures each value and "
             "probe_then_tune fixes it to the fastest (the strategy's NEUTRAL)",
    "speed_and_result": "how fast a step runs and the numbers computed: the probe measures each value and "
                        "probe_then_tune keeps the searched values (comparing `exactness` where a row ranks it)",
}
# What applies a setting: `applied_by` of a row (the trial context's part, else the built-in trainer's).
APPLIERS: dict[str, str] = {
    "around": "around every trial, whatever the training function does (trainer.train, trial_session)",
    "optimizer": "the context's optimizer factory (ctx.prepare)",
    "schedule": "the learning-rate schedule the context steps (ctx.backward)",
    "step": "ctx.backward: accumulation and clipping",
    "loader": "ctx.loader",
    "dataloader": "ctx.loader's DataLoader (data_on_device: false)",
    "prepare": "ctx.prepare(model): init, memory format, compile",
    "autocast": "ctx.autocast()",
    "epochs": "ctx.epochs()",
    "stop": "the context's stop rules (early stopping)",
    "clock": "the context's clocks",
    "loss": "the built-in trainer's loss (a fit's own reads it from ctx.settings)",
    "model": "the built-in trainer's model",
    "augment": "the built-in trainer's augmentation of training batches",
    "eval": "the built-in trainer's evaluation",
    "checkpoint": "the built-in trainer's loading of model.checkpoint",
    "after": "the built-in trainer's steps after training (compression, inference metrics)",
}


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # "float" | "int" | "bool" | "choice" | "str"
    default: Any
    doc: str
    names: tuple[str, ...] = ()  # a choice's names (a registry's: names.py)
    low: float | None = None  # inclusive bound
    high: float | None = None  # inclusive bound
    low_open: bool = False  # True: value must be > low
    high_open: bool = False  # True: value must be < high
    searchable: bool = True
    acts: str = field(kw_only=True)  # one of ACTS
    applied_by: str = field(kw_only=True)  # one of APPLIERS
    # speed_and_result choices only: each name's rank, more exact numerics higher (probe_then_tune keeps a slower
    # combination only when nothing at least as exact is faster)
    exactness: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:  # a row that does not say how it acts breaks the import, not a trial
        if self.acts not in ACTS:
            raise ValueError(f"setting {self.name}: acts must be one of {', '.join(ACTS)}; got {self.acts!r}")
        if self.applied_by not in APPLIERS:
            raise ValueError(f"setting {self.name}: applied_by must be one of {', '.join(APPLIERS)}; "
                             f"got {self.applied_by!r}")
        if self.exactness and (self.acts != "speed_and_result" or {n for n, _ in self.exactness} != set(self.names)):
            raise ValueError(f"setting {self.name}: exactness ranks every name of a speed_and_result choice")

    @property
    def choices(self) -> tuple[str, ...]:
        """The allowed names of a choice setting (a registry's keys, in its order)."""
        return self.names

    def check(self, value: Any) -> Any:
        """Return the value coerced to this setting's type, or raise ValueError with the rule."""
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"must be true or false; got {shown(value)}")
            return value
        if self.kind == "choice":
            if value not in self.choices:
                raise ValueError(f"must be one of {', '.join(self.choices)}; got {shown(value)}")
            return value
        if self.kind == "str":
            if not isinstance(value, str) or not value:
                raise ValueError(f"must be a non-empty string; got {shown(value)}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            # (NaN passes every comparison below; int(inf) raises OverflowError)
            raise ValueError(f"must be a finite number ({self.rule().strip()}); got {shown(value)}")
        if self.kind == "int":
            if float(value) != int(value):
                raise ValueError(f"must be an integer; got {shown(value)}")
            value = int(value)
        else:
            value = float(value)
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            raise ValueError(f"must be {'>' if self.low_open else '>='} {self.low:g}; got {shown(value)}")
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            raise ValueError(f"must be {'<' if self.high_open else '<='} {self.high:g}; got {shown(value)}")
        return value

    def rule(self) -> str:
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind in ("bool", "str"):
            return self.kind
        lo = "" if self.low is None else f"{'>' if self.low_open else '>='} {self.low:g}"
        hi = "" if self.high is None else f"{'<' if self.high_open else '<='} {self.high:g}"
        return f"{self.kind} " + " and ".join(p for p in (lo, hi) if p)


def _s(name: str, kind: str, default: Any, doc: str, *, acts: str, by: str, **kw: Any) -> Setting:
    return Setting(name=name, kind=kind, default=default, doc=doc, acts=acts, applied_by=by, **kw)


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        # Hyper-parameters
        _s("lr", "float", 1e-3, "peak learning rate", low=0, low_open=True, acts="result", by="optimizer"),
        _s("optimizer", "choice", "adam", "optimizer", names=OPTIMIZER_NAMES, acts="result", by="optimizer"),
        _s("momentum", "float", 0.9, "momentum (sgd, sgd_nesterov, rmsprop)", low=0, high=1, high_open=True,
           acts="result", by="optimizer"),
        _s("weight_decay", "float", 0.0, "L2 / decoupled weight decay", low=0, acts="result", by="optimizer"),
        _s("batch_size", "int", 64, "training batch size", low=1, acts="speed_and_result", by="loader"),
        _s("epochs", "int", 10, "training epochs", low=1, acts="result", by="epochs"),
        _s("dropout", "float", 0.0, "dropout before the classifier head", low=0, high=1, high_open=True,
           acts="result", by="model"),
        _s("lr_schedule", "choice", "constant", "learning-rate schedule over the run", names=SCHEDULE_NAMES,
           acts="result", by="schedule"),
        _s("label_smoothing", "float", 0.0, "cross-entropy label smoothing", low=0, high=1, high_open=True,
           acts="result", by="loss"),
        _s("data_fraction", "float", 1.0, "stratified share of the training split used (low-fidelity trials)",
           low=0, low_open=True, high=1, acts="result", by="loader"),
        _s("grad_accum_steps", "int", 1, "micro-batches per optimizer step (effective batch = batch_size x this)",
           low=1, acts="result", by="step"),
        _s("grad_clip", "float", 0.0, "max gradient norm; 0 turns clipping off", low=0, acts="result", by="step"),
        # Augmentation of training batches on the device (image data; training/data/augment.py)
        _s("aug_crop_padding", "int", 0, "random crop: reflect-pad each side by this many pixels, crop back at a "
           "random offset per sample; 0 = off", low=0, acts="result", by="augment"),
        _s("aug_flip", "bool", False, "flip half the training images horizontally, chosen per sample",
           acts="result", by="augment"),
        _s("aug_cutout", "int", 0, "cutout: zero a square of this side (pixels) at a random place per sample; "
           "0 = off", low=0, acts="result", by="augment"),
        # Weight initialization
        _s("init", "choice", "default", "weight initialization (biases zeroed unless default)", names=INIT_NAMES,
           acts="result", by="prepare"),
        # Acceleration
        _s("device", "str", "auto", "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps", searchable=False,
           acts="speed_and_result", by="around"),
        _s("devices", "int", 1, "processes one trial trains on with DistributedDataParallel (a GPU each, NCCL; or "
           "CPU processes, gloo); batch_size stays the global batch", low=1, acts="speed_and_result", by="around"),
        _s("precision", "choice", "fp32", "autocast precision; fp16 adds a GradScaler", names=PRECISIONS,
           acts="speed_and_result", by="autocast", exactness=(("fp32", 2), ("bf16", 1), ("fp16", 1))),
        _s("channels_last", "bool", False, "channels_last memory format for conv nets", acts="speed", by="prepare"),
        _s("compile", "bool", False, "torch.compile the model", acts="speed", by="prepare"),
        _s("compile_mode", "choice", "default", "torch.compile mode", names=COMPILE_MODES, acts="speed", by="prepare"),
        _s("time_excludes_compile", "bool", False, "leave compile time out of train_time_s", searchable=False,
           acts="result", by="clock"),
        _s("data_on_device", "bool", True, "keep the dataset on the device and batch by index (no DataLoader)",
           acts="speed", by="loader"),
        _s("num_workers", "int", 0, "DataLoader worker processes (data_on_device: false)", low=0,
           acts="speed", by="dataloader"),
        _s("pin_memory", "bool", False, "pinned host memory for DataLoader batches", acts="speed", by="dataloader"),
        _s("prefetch_factor", "int", 2, "batches prefetched per DataLoader worker", low=1,
           acts="speed", by="dataloader"),
        _s("persistent_workers", "bool", False, "keep DataLoader workers alive between epochs",
           acts="speed", by="dataloader"),
        _s("cudnn_benchmark", "bool", False, "torch.backends.cudnn.benchmark during the trial",
           acts="speed", by="around"),
        _s("matmul_precision", "choice", "highest", "torch.set_float32_matmul_precision (high/medium: TF32)",
           names=MATMUL_PRECISIONS, acts="speed_and_result", by="around",
           exactness=(("highest", 3), ("high", 2), ("medium", 1))),
        _s("cpu_threads", "int", 0, "torch CPU threads; 0 keeps torch's default (less one per DataLoader worker; "
                                    "halved after an oversubscribed trial)", low=0, acts="speed", by="around"),
        _s("eval_batch_size", "int", 1024, "batch size for validation passes", low=1, acts="result", by="eval"),
        # Early stopping inside a trial (0 turns it off)
        _s("early_stopping_patience", "int", 0, "epochs without val_loss improvement before stopping; 0 = off",
           low=0, searchable=False, acts="result", by="stop"),
        _s("early_stopping_min_delta", "float", 0.0, "improvement smaller than this does not count", low=0,
           searchable=False, acts="result", by="stop"),
        # Compression after training, and transfer learning (autotune/compress/)
        _s("prune_method", "choice", "none", "weight pruning after training: global L1 magnitude, or whole "
           "conv channels / linear rows (cut out of the layers)", names=PRUNE_METHOD_NAMES, acts="result", by="after"),
        _s("prune_amount", "float", 0.0, "share of weights (l1_unstructured) or channels per layer "
           "(ln_structured) pruned", low=0, high=0.95, acts="result", by="after"),
        _s("finetune_epochs", "int", 0, "epochs of training after pruning, masks held, at 0.1 x lr", low=0,
           acts="result", by="after"),
        _s("quantize", "choice", "none", "post-training quantization (int8 on CPU) or an inference dtype cast",
           names=QUANTIZER_NAMES, acts="result", by="after"),
        _s("qat", "bool", False, "quantization-aware fine-tuning: max(1, finetune_epochs) epochs with fake int8, "
           "then int8 (needs quantize static_int8)", acts="result", by="after"),
        _s("freeze", "choice", "none", "layers kept fixed after loading model.checkpoint", names=FREEZER_NAMES,
           acts="result", by="checkpoint"),
        _s("infer_batch_size", "int", 256, "batch size of the inference-latency measurement", low=1,
           acts="result", by="after"),
        _s("infer_device", "str", "auto", "device for inference metrics: auto (training device; cpu for int8), "
           "cpu, cuda, cuda:N or mps", searchable=False, acts="result", by="after"),
    ]
}

DEFAULTS: dict[str, Any] = {name: s.default for name, s in SETTINGS.items()}


def acting(*acts: str) -> tuple[str, ...]:
    """The settings that act in one of these ways (ACTS), in the catalogue's order."""
    return tuple(name for name, s in SETTINGS.items() if s.acts in acts)


def applied_by(*appliers: str) -> tuple[str, ...]:
    """The settings one of these parts applies (APPLIERS), in the catalogue's order."""
    return tuple(name for name, s in SETTINGS.items() if s.applied_by in appliers)


# The built-in trainer's own steps on its model (compression, inference metrics, checkpoint loading): a training
# function of the user's (`trainer:`) exposes none of them, so validation refuses them set away from their default.
BUILTIN_ONLY = applied_by("after", "checkpoint")


def merge(train: Mapping[str, Any], sampled: Mapping[str, Any] | None = None,
          overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A run's settings, put together one way everywhere (a trial, `autotune.train`, `profile`, `best --export`):
    the catalogue's defaults, then the config's fixed `train:`, then the values a trial sampled, then explicit
    overrides (`params`); a later layer wins."""
    return {**DEFAULTS, **train, **(sampled or {}), **(overrides or {})}


def check_params(params: Mapping[str, Any], file: str, prefix: str = "") -> dict[str, Any]:
    """Settings given by name (the Python API's `params`, a `--params` file): each known and valid,
    else a ConfigError naming it; returns the values coerced to their settings' types.
    `user.NAME` keys (a training function's own parameters) pass as they are."""
    out = {}
    for key, value in params.items():
        if key.startswith("user.") and key[5:].isidentifier():  # a user training function's own parameter
            out[key] = value
            continue
        if key.startswith("model."):  # an architecture key: checked where the model is built (models.build_for)
            out[key] = value
            continue
        if key not in SETTINGS:
            raise ConfigError(file, prefix + key, f"unknown setting{suggest(key, SETTINGS)}; {one_of(SETTINGS)}")
        try:
            out[key] = SETTINGS[key].check(value)
        except ValueError as e:
            raise ConfigError(file, prefix + key, str(e)) from None
    return out


# a searched architecture key rides along with the trainer settings (schema.MODEL_PREFIX: schema.py imports this module)
MODEL_KEY_PREFIX = "model."


_T = TypeVar("_T")


def _born(obj: _T, **slots: Any) -> _T:
    """A new `Settings`' slots, written once before anyone holds it (its __setattr__ refuses every later write)."""
    for name, value in slots.items():
        object.__setattr__(obj, name, value)
    return obj


class Settings(SettingsFields):
    """One run's trainer settings, typed and frozen: every setting of the catalogue (a missing one takes its
    default; each value checked and coerced to its setting's type) and the `model.KEY` values of a searched
    architecture. Read as a mapping (`s["lr"]`, `**s`) or by name (`s.lr`); nothing can change it
    (`s.replace(lr=0.1)` is a new one). What the trainer and a user's `ctx.settings` get. The reads' types come
    from the catalogue (`SettingsFields`, generated: settings_fields.py)."""

    __slots__ = ("_values",)
    _values: Mapping[str, Any]

    def __new__(cls, values: Mapping[str, Any] = MappingProxyType({})) -> Settings:
        if type(values) is Settings:
            return values
        if isinstance(values, Settings):  # a watched view (`watched`): the same values, reads no longer noted
            return _born(super().__new__(cls), _values=values._values)
        checked = dict(DEFAULTS)
        for key, value in values.items():
            if key.startswith(MODEL_KEY_PREFIX):
                checked[key] = value
                continue
            if key not in SETTINGS:
                raise ConfigError(None, key, f"unknown setting{suggest(key, SETTINGS)}; {one_of(SETTINGS)}")
            try:
                checked[key] = SETTINGS[key].check(value)
            except ValueError as e:
                raise ConfigError(None, key, str(e)) from None
        return _born(super().__new__(cls), _values=MappingProxyType(checked))

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    if not TYPE_CHECKING:  # a checker sees only the catalogue's names (SettingsFields): a misspelt one is an error
        def __getattr__(self, name: str) -> Any:  # (a catalogue name is a property: only a misspelt one gets here)
            raise AttributeError(f"no setting {name!r}{suggest(name, SETTINGS)}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"settings are frozen: use .replace({name}=...) for a changed copy")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("settings are frozen")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled to the processes of a several-device trial
        return (Settings, (dict(self._values),))

    def __repr__(self) -> str:
        return f"Settings({dict(self._values)!r})"

    def replace(self, **changes: Any) -> Settings:
        """A copy with some settings changed (checked like the rest)."""
        return Settings({**self._values, **changes})

    def watched(self, reads: set[str]) -> Settings:
        """The same settings, every value read noted in `reads`: by name (`s["lr"]`, `s.lr`, `s.get("lr")`), or
        all of them when the mapping is copied or its values iterated (`dict(s)`, `{**s}`, `s.items()`). Which
        settings a trial read is which ones it could have applied (the trial context's `not_applied`)."""
        return _Watched(self, reads)


class _Watched(Settings):
    """A read-noting view of a `Settings` (`Settings.watched`); `in` and iterating the names are not reads."""

    __slots__ = ("_reads",)
    _reads: set[str]

    def __new__(cls, base: Settings, reads: set[str]) -> _Watched:
        return _born(object.__new__(cls), _values=base._values, _reads=reads)

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        self._reads.add(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._values
