"""The catalogue of trainer settings: every key allowed in `train:` and `space:`.

One table, so the config validator, the search space, the trainer and the generated
reference page (docs/hooks/reference.py) agree on names, types, defaults and allowed values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from autotune.core import ConfigError, one_of, shown, suggest
from autotune.spec.names import (
    FREEZER_NAMES,
    INIT_NAMES,
    OPTIMIZER_NAMES,
    PRUNE_METHOD_NAMES,
    QUANTIZER_NAMES,
    SCHEDULE_NAMES,
)

PRECISIONS = ("fp32", "fp16", "bf16")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
MATMUL_PRECISIONS = ("highest", "high", "medium")


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
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"must be a number; got {shown(value)}")
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


def _s(name: str, kind: str, default: Any, doc: str, **kw: Any) -> Setting:
    return Setting(name=name, kind=kind, default=default, doc=doc, **kw)


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        # Hyper-parameters
        _s("lr", "float", 1e-3, "peak learning rate", low=0, low_open=True),
        _s("optimizer", "choice", "adam", "optimizer", names=OPTIMIZER_NAMES),
        _s("momentum", "float", 0.9, "momentum (sgd, sgd_nesterov, rmsprop)", low=0, high=1, high_open=True),
        _s("weight_decay", "float", 0.0, "L2 / decoupled weight decay", low=0),
        _s("batch_size", "int", 64, "training batch size", low=1),
        _s("epochs", "int", 10, "training epochs", low=1),
        _s("dropout", "float", 0.0, "dropout before the classifier head", low=0, high=1, high_open=True),
        _s("lr_schedule", "choice", "constant", "learning-rate schedule over the run", names=SCHEDULE_NAMES),
        _s("label_smoothing", "float", 0.0, "cross-entropy label smoothing", low=0, high=1, high_open=True),
        _s("data_fraction", "float", 1.0, "stratified share of the training split used (low-fidelity trials)",
           low=0, low_open=True, high=1),
        _s("grad_accum_steps", "int", 1, "micro-batches per optimizer step (effective batch = batch_size x this)",
           low=1),
        _s("grad_clip", "float", 0.0, "max gradient norm; 0 turns clipping off", low=0),
        # Augmentation of training batches on the device (image data; autotune/augment.py)
        _s("aug_crop_padding", "int", 0, "random crop: reflect-pad each side by this many pixels, crop back at a "
           "random offset per sample; 0 = off", low=0),
        _s("aug_flip", "bool", False, "flip half the training images horizontally, chosen per sample"),
        _s("aug_cutout", "int", 0, "cutout: zero a square of this side (pixels) at a random place per sample; "
           "0 = off", low=0),
        # Weight initialization
        _s("init", "choice", "default", "weight initialization (biases zeroed unless default)", names=INIT_NAMES),
        # Acceleration
        _s("device", "str", "auto", "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps", searchable=False),
        _s("devices", "int", 1, "processes one trial trains on with DistributedDataParallel (a GPU each, NCCL; or "
           "CPU processes, gloo); batch_size stays the global batch", low=1),
        _s("precision", "choice", "fp32", "autocast precision; fp16 adds a GradScaler", names=PRECISIONS),
        _s("channels_last", "bool", False, "channels_last memory format for conv nets"),
        _s("compile", "bool", False, "torch.compile the model"),
        _s("compile_mode", "choice", "default", "torch.compile mode", names=COMPILE_MODES),
        _s("time_excludes_compile", "bool", False, "leave compile time out of train_time_s", searchable=False),
        _s("data_on_device", "bool", True, "keep the dataset on the device and batch by index (no DataLoader)"),
        _s("num_workers", "int", 0, "DataLoader worker processes (data_on_device: false)", low=0),
        _s("pin_memory", "bool", False, "pinned host memory for DataLoader batches"),
        _s("prefetch_factor", "int", 2, "batches prefetched per DataLoader worker", low=1),
        _s("persistent_workers", "bool", False, "keep DataLoader workers alive between epochs"),
        _s("cudnn_benchmark", "bool", False, "torch.backends.cudnn.benchmark during the trial"),
        _s("matmul_precision", "choice", "highest", "torch.set_float32_matmul_precision (high/medium: TF32)",
           names=MATMUL_PRECISIONS),
        _s("cpu_threads", "int", 0, "torch CPU threads; 0 keeps torch's default (less one per DataLoader worker; "
                                    "halved after an oversubscribed trial)", low=0),
        _s("eval_batch_size", "int", 1024, "batch size for validation passes", low=1),
        # Early stopping inside a trial (0 turns it off)
        _s("early_stopping_patience", "int", 0, "epochs without val_loss improvement before stopping; 0 = off",
           low=0, searchable=False),
        _s("early_stopping_min_delta", "float", 0.0, "improvement smaller than this does not count", low=0,
           searchable=False),
        # Compression after training, and transfer learning (autotune/compress/)
        _s("prune_method", "choice", "none", "weight pruning after training: global L1 magnitude, or whole "
           "conv channels / linear rows (cut out of the layers)", names=PRUNE_METHOD_NAMES),
        _s("prune_amount", "float", 0.0, "share of weights (l1_unstructured) or channels per layer "
           "(ln_structured) pruned", low=0, high=0.95),
        _s("finetune_epochs", "int", 0, "epochs of training after pruning, masks held, at 0.1 x lr", low=0),
        _s("quantize", "choice", "none", "post-training quantization (int8 on CPU) or an inference dtype cast",
           names=QUANTIZER_NAMES),
        _s("qat", "bool", False, "quantization-aware fine-tuning: max(1, finetune_epochs) epochs with fake int8, "
           "then int8 (needs quantize static_int8)"),
        _s("freeze", "choice", "none", "layers kept fixed after loading model.checkpoint", names=FREEZER_NAMES),
        _s("infer_batch_size", "int", 256, "batch size of the inference-latency measurement", low=1),
        _s("infer_device", "str", "auto", "device for inference metrics: auto (training device; cpu for int8), "
           "cpu, cuda, cuda:N or mps", searchable=False),
    ]
}

DEFAULTS: dict[str, Any] = {name: s.default for name, s in SETTINGS.items()}


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


MODEL_KEY_PREFIX = "model."  # a searched architecture key rides along with the trainer settings (config.MODEL_PREFIX)


class Settings(Mapping[str, Any]):
    """One run's trainer settings, typed and frozen: every setting of the catalogue (a missing one takes its
    default; each value checked and coerced to its setting's type) and the `model.KEY` values of a searched
    architecture. Read as a mapping (`s["lr"]`, `**s`) or by name (`s.lr`); nothing can change it
    (`s.replace(lr=0.1)` is a new one). What the trainer and a user's `ctx.settings` get."""

    __slots__ = ("_values",)
    _values: Mapping[str, Any]

    def __new__(cls, values: Mapping[str, Any] = MappingProxyType({})) -> Settings:
        if type(values) is Settings:
            return values
        if isinstance(values, Settings):  # a watched view (`watched`): the same values, reads no longer noted
            plain = super().__new__(cls)
            super(Mapping, plain).__setattr__("_values", values._values)
            return plain
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
        self = super().__new__(cls)
        super(Mapping, self).__setattr__("_values", MappingProxyType(checked))  # the one write, at birth
        return self

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no setting {name!r}{suggest(name, SETTINGS)}") from None

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

    def __new__(cls, base: Settings, reads: set[str]) -> _Watched:  # type: ignore[misc]
        self = object.__new__(cls)
        object.__setattr__(self, "_values", base._values)
        object.__setattr__(self, "_reads", reads)
        return self

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        self._reads.add(key)
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no setting {name!r}{suggest(name, SETTINGS)}") from None

    def __contains__(self, key: object) -> bool:
        return key in self._values
