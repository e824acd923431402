"""GENERATED from the settings catalogue (`SETTINGS`, autotune/spec/settings.py) by
`python -m autotune.spec.settings_codegen`: do not edit; tests/spec_tests/test_settings_fields.py fails when stale.

Each setting as a typed read-only attribute (`s.lr -> float`) and key (`s["lr"] -> float`; a choice's value is the
`Literal` of its names), so a type checker proves every read of `Settings` (its base). Any other key (`model.KEY`)
reads as `Any`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, overload

# Each choice setting's values.
OptimizerChoice = Literal[
    "sgd", "sgd_nesterov", "adam", "adamw", "rmsprop",
]
LrScheduleChoice = Literal[
    "constant", "cosine", "onecycle",
]
InitChoice = Literal[
    "default", "xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal",
]
PrecisionChoice = Literal[
    "fp32", "fp16", "bf16",
]
CompileModeChoice = Literal[
    "default", "reduce-overhead", "max-autotune",
]
MatmulPrecisionChoice = Literal[
    "highest", "high", "medium",
]
PruneMethodChoice = Literal[
    "none", "l1_unstructured", "ln_structured",
]
QuantizeChoice = Literal[
    "none", "dynamic_int8", "static_int8", "bf16", "fp16",
]
FreezeChoice = Literal[
    "none", "features", "all_but_head",
]

# The settings of each plain type, by name.
FloatKey = Literal[
    "lr", "momentum", "weight_decay", "dropout", "label_smoothing", "data_fraction", "grad_clip",
    "early_stopping_min_delta", "prune_amount",
]
IntKey = Literal[
    "batch_size", "epochs", "grad_accum_steps", "aug_crop_padding", "aug_cutout", "devices", "num_workers",
    "prefetch_factor", "cpu_threads", "eval_batch_size", "early_stopping_patience", "finetune_epochs",
    "infer_batch_size",
]
BoolKey = Literal[
    "aug_flip", "channels_last", "compile", "time_excludes_compile", "data_on_device", "pin_memory",
    "persistent_workers", "cudnn_benchmark", "qat",
]
StrKey = Literal[
    "device", "infer_device",
]


class SettingsFields(Mapping[str, Any]):
    """The catalogue's settings, typed: `Settings`' base (its values are `_values`)."""

    __slots__ = ()
    _values: Mapping[str, Any]

    @overload
    def __getitem__(self, key: FloatKey) -> float: ...
    @overload
    def __getitem__(self, key: IntKey) -> int: ...
    @overload
    def __getitem__(self, key: BoolKey) -> bool: ...
    @overload
    def __getitem__(self, key: StrKey) -> str: ...
    @overload
    def __getitem__(self, key: Literal["optimizer"]) -> OptimizerChoice: ...
    @overload
    def __getitem__(self, key: Literal["lr_schedule"]) -> LrScheduleChoice: ...
    @overload
    def __getitem__(self, key: Literal["init"]) -> InitChoice: ...
    @overload
    def __getitem__(self, key: Literal["precision"]) -> PrecisionChoice: ...
    @overload
    def __getitem__(self, key: Literal["compile_mode"]) -> CompileModeChoice: ...
    @overload
    def __getitem__(self, key: Literal["matmul_precision"]) -> MatmulPrecisionChoice: ...
    @overload
    def __getitem__(self, key: Literal["prune_method"]) -> PruneMethodChoice: ...
    @overload
    def __getitem__(self, key: Literal["quantize"]) -> QuantizeChoice: ...
    @overload
    def __getitem__(self, key: Literal["freeze"]) -> FreezeChoice: ...
    @overload
    def __getitem__(self, key: str) -> Any: ...
    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    @property
    def lr(self) -> float:
        """peak learning rate"""
        return self["lr"]

    @property
    def optimizer(self) -> OptimizerChoice:
        """optimizer"""
        return self["optimizer"]

    @property
    def momentum(self) -> float:
        """momentum (sgd, sgd_nesterov, rmsprop)"""
        return self["momentum"]

    @property
    def weight_decay(self) -> float:
        """L2 / decoupled weight decay"""
        return self["weight_decay"]

    @property
    def batch_size(self) -> int:
        """training batch size"""
        return self["batch_size"]

    @property
    def epochs(self) -> int:
        """training epochs"""
        return self["epochs"]

    @property
    def dropout(self) -> float:
        """dropout before the classifier head"""
        return self["dropout"]

    @property
    def lr_schedule(self) -> LrScheduleChoice:
        """learning-rate schedule over the run"""
        return self["lr_schedule"]

    @property
    def label_smoothing(self) -> float:
        """cross-entropy label smoothing"""
        return self["label_smoothing"]

    @property
    def data_fraction(self) -> float:
        """stratified share of the training split used (low-fidelity trials)"""
        return self["data_fraction"]

    @property
    def grad_accum_steps(self) -> int:
        """micro-batches per optimizer step (effective batch = batch_size x this)"""
        return self["grad_accum_steps"]

    @property
    def grad_clip(self) -> float:
        """max gradient norm; 0 turns clipping off"""
        return self["grad_clip"]

    @property
    def aug_crop_padding(self) -> int:
        """random crop: reflect-pad each side by this many pixels, crop back at a random offset per sample; 0 = off"""
        return self["aug_crop_padding"]

    @property
    def aug_flip(self) -> bool:
        """flip half the training images horizontally, chosen per sample"""
        return self["aug_flip"]

    @property
    def aug_cutout(self) -> int:
        """cutout: zero a square of this side (pixels) at a random place per sample; 0 = off"""
        return self["aug_cutout"]

    @property
    def init(self) -> InitChoice:
        """weight initialization (biases zeroed unless default)"""
        return self["init"]

    @property
    def device(self) -> str:
        """auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps"""
        return self["device"]

    @property
    def devices(self) -> int:
        """processes one trial trains on with DistributedDataParallel (a GPU each, NCCL; or CPU processes, ..."""
        return self["devices"]

    @property
    def precision(self) -> PrecisionChoice:
        """autocast precision; fp16 adds a GradScaler"""
        return self["precision"]

    @property
    def channels_last(self) -> bool:
        """channels_last memory format for conv nets"""
        return self["channels_last"]

    @property
    def compile(self) -> bool:
        """torch.compile the model"""
        return self["compile"]

    @property
    def compile_mode(self) -> CompileModeChoice:
        """torch.compile mode"""
        return self["compile_mode"]

    @property
    def time_excludes_compile(self) -> bool:
        """leave compile time out of train_time_s"""
        return self["time_excludes_compile"]

    @property
    def data_on_device(self) -> bool:
        """keep the dataset on the device and batch by index (no DataLoader)"""
        return self["data_on_device"]

    @property
    def num_workers(self) -> int:
        """DataLoader worker processes (data_on_device: false)"""
        return self["num_workers"]

    @property
    def pin_memory(self) -> bool:
        """pinned host memory for DataLoader batches"""
        return self["pin_memory"]

    @property
    def prefetch_factor(self) -> int:
        """batches prefetched per DataLoader worker"""
        return self["prefetch_factor"]

    @property
    def persistent_workers(self) -> bool:
        """keep DataLoader workers alive between epochs"""
        return self["persistent_workers"]

    @property
    def cudnn_benchmark(self) -> bool:
        """torch.backends.cudnn.benchmark during the trial"""
        return self["cudnn_benchmark"]

    @property
    def matmul_precision(self) -> MatmulPrecisionChoice:
        """torch.set_float32_matmul_precision (high/medium: TF32)"""
        return self["matmul_precision"]

    @property
    def cpu_threads(self) -> int:
        """torch CPU threads; 0 keeps torch's default (less one per DataLoader worker; halved after an ..."""
        return self["cpu_threads"]

    @property
    def eval_batch_size(self) -> int:
        """batch size for validation passes"""
        return self["eval_batch_size"]

    @property
    def early_stopping_patience(self) -> int:
        """epochs without val_loss improvement before stopping; 0 = off"""
        return self["early_stopping_patience"]

    @property
    def early_stopping_min_delta(self) -> float:
        """improvement smaller than this does not count"""
        return self["early_stopping_min_delta"]

    @property
    def prune_method(self) -> PruneMethodChoice:
        """weight pruning after training: global L1 magnitude, or whole conv channels / linear rows (cut out of ..."""
        return self["prune_method"]

    @property
    def prune_amount(self) -> float:
        """share of weights (l1_unstructured) or channels per layer (ln_structured) pruned"""
        return self["prune_amount"]

    @property
    def finetune_epochs(self) -> int:
        """epochs of training after pruning, masks held, at 0.1 x lr"""
        return self["finetune_epochs"]

    @property
    def quantize(self) -> QuantizeChoice:
        """post-training quantization (int8 on CPU) or an inference dtype cast"""
        return self["quantize"]

    @property
    def qat(self) -> bool:
        """quantization-aware fine-tuning: max(1, finetune_epochs) epochs with fake int8, then int8 (needs ..."""
        return self["qat"]

    @property
    def freeze(self) -> FreezeChoice:
        """layers kept fixed after loading model.checkpoint"""
        return self["freeze"]

    @property
    def infer_batch_size(self) -> int:
        """batch size of the inference-latency measurement"""
        return self["infer_batch_size"]

    @property
    def infer_device(self) -> str:
        """device for inference metrics: auto (training device; cpu for int8), cpu, cuda, cuda:N or mps"""
        return self["infer_device"]
