"""The trial context: what a training function receives, for built-in and user training alike.

A `fit(ctx)` trains in its own way; the context brings the trial's settings, keeps the clocks and
applies the stop rules. It is the only place that applies an acceleration setting or reads a clock:

    def fit(ctx: autotune.TrialContext):
        model, opt = ctx.prepare(MyNet(width=ctx.params["width"]))   # device, init, channels_last, compile, optimizer
        train = ctx.loader(my_train_dataset)                         # device-resident batches or a tuned DataLoader
        for epoch in ctx.epochs():                                   # honest epoch clocks
            model.train()
            for x, y in train:
                with ctx.autocast():                                 # the trial's precision
                    loss = my_loss(model(x), y)
                ctx.backward(loss)                                   # GradScaler, accumulation, clip, step
            ctx.report(val_f1=evaluate(ctx.model))                   # the stop rules act here
        return {"val_f1": evaluate(ctx.model, full=True)}            # optional: final metrics (a dict)

`ctx.backward` divides the loss by `grad_accum_steps` (the accumulated gradient is the mean over the
micro-batches): give it each micro-batch's mean loss, not one already divided. What `fit` returns, None
or a dict of final metrics, is added to (and overrides) the last epoch's reported metrics.

No Optuna here: the stop rules reach the context as one callback (`on_epoch`), which may raise
`TrialStopped`. An epoch's training clock runs from its start (after a device synchronize) to the end of
its last ctx.backward step, timed by a CUDA event per step on a GPU; the host never waits on the device
inside an epoch except once every `FINITE_CHECK_EVERY` steps (a blow-up is stopped early).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset, TensorDataset

from autotune.core._errors import STOP_REASONS, AutotuneError, TrialStopped
from autotune.core._metrics import CATALOGUE, CLOCKS
from autotune.spec._settings import Settings
from autotune.training import _accel as accel
from autotune.training import _unread as unread
from autotune.training._distributed import Group, ShardedBatches
from autotune.training._optimizers import SCHEDULES, make_optimizer
from autotune.training._stops import Limits, check_divergence, check_slow
from autotune.training._throughput import ProbeDone, ProbeWindow

FINITE_CHECK_EVERY = 64  # steps between the only in-epoch host syncs: a non-finite loss stops the trial early
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
# Measured by the context: a training function reports what it evaluates, never these.
CLOCK_METRICS = CLOCKS


class ContextMisuse(AutotuneError):
    """A training function used the trial context in a way that cannot work (a clear message, never a guess)."""


@dataclass
class EpochRecord:
    """One epoch as the context measured it, with the metrics the training function reported."""

    epoch: int
    train_loss: float  # mean training loss (reported `train_loss`, else measured from ctx.backward); NaN if none
    epoch_time_s: float  # training time of this epoch (evaluation left out)
    train_time_s: float  # cumulative, compile included unless time_excludes_compile
    samples_per_s: float
    data_wait_fraction: float
    lr: float
    metrics: dict[str, float] = field(default_factory=dict)  # what ctx.report received (val_accuracy, val_f1...)

    def __getattr__(self, name: str) -> float:  # rec.val_accuracy reads a reported metric
        metrics = self.__dict__.get("metrics", {})
        if name in metrics:
            return metrics[name]
        raise AttributeError(name)

    def as_dict(self) -> dict[str, Any]:
        """Flat: what the trial's `history` user attr stores (the report and pruners read these keys)."""
        return {"epoch": self.epoch, "train_loss": self.train_loss, **self.metrics, "epoch_time_s": self.epoch_time_s,
                "train_time_s": self.train_time_s, "samples_per_s": self.samples_per_s,
                "data_wait_fraction": self.data_wait_fraction, "lr": self.lr}


OnEpoch = Callable[[EpochRecord], None]


@dataclass
class TrainResult:
    """What one training run measured: final metrics, clocks, per-epoch history, the trained model."""

    final: dict[str, float]  # the last epoch's reported metrics, then what fit returned, then post-training steps
    train_time_s: float
    samples_per_s: float
    compile_time_s: float
    data_wait_fraction: float
    epochs_run: int
    device: str
    precision: str
    history: list[EpochRecord] = field(default_factory=list)
    stopped_early_at: int | None = None  # epoch at which early stopping ended training
    loss_scale: float | None = None  # the GradScaler's final scale (fp16 only)
    not_applied: dict[str, str] = field(default_factory=dict)  # setting -> why it could not take effect here
    model_params: int = 0  # parameters of the trained model (the architecture's size, for model.* searches)
    model: nn.Module | None = field(default=None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)  # post-training metrics (compression)
    compressed_model: nn.Module | None = field(default=None, repr=False)

    @property
    def val_accuracy(self) -> float:
        return float(self.final.get("val_accuracy", math.nan))

    @property
    def val_loss(self) -> float:
        return float(self.final.get("val_loss", math.nan))

    def metrics(self) -> dict[str, float]:
        out = {**self.final, "train_time_s": self.train_time_s, "samples_per_s": self.samples_per_s,
               "compile_time_s": self.compile_time_s, "data_wait_fraction": self.data_wait_fraction}
        if self.model_params:
            out["model_params"] = float(self.model_params)
        out.update(self.extra)
        return out


# ---------------------------------------------------------------- batches


def _to_device(batch: Any, dev: torch.device, channels_last: bool) -> Any:
    """Every tensor of a batch (tuple, list, dict) on the device, without blocking; 4-D tensors (images,
    uint8 ones too: what is computed from them keeps the format) in channels_last when the trial asks."""
    if isinstance(batch, torch.Tensor):
        out = batch.to(dev, non_blocking=True)
        if channels_last and out.ndim == 4:
            out = out.contiguous(memory_format=torch.channels_last)
        return out
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, dev, channels_last) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, dev, channels_last) for k, v in batch.items()}
    return batch


def _first_tensor(batch: Any) -> torch.Tensor | None:
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, (list, tuple)) and batch:
        return _first_tensor(batch[0])
    if isinstance(batch, dict) and batch:
        return _first_tensor(next(iter(batch.values())))
    return None


def _stratified(y: torch.Tensor, fraction: float, gen: torch.Generator) -> torch.Tensor:
    """Indices of a share of each class (at least one each): the same classes, fewer samples."""
    keep = []
    for c in torch.unique(y):
        idx = torch.nonzero(y == c).flatten()
        n = max(1, int(round(len(idx) * fraction)))
        keep.append(idx[torch.randperm(len(idx), generator=gen)[:n]])
    return torch.cat(keep).sort().values


def fraction_indices(n: int, fraction: float, seed: int, labels: torch.Tensor | None = None) -> torch.Tensor | None:
    """`data_fraction` of n samples (stratified when integer class labels are known); None keeps all."""
    if fraction >= 1.0:
        return None
    gen = torch.Generator().manual_seed(seed)
    if labels is not None and labels.ndim == 1 and not labels.is_floating_point() and not labels.is_complex():
        return _stratified(labels.cpu(), fraction, gen)
    return torch.randperm(n, generator=gen)[: max(1, int(round(n * fraction)))].sort().values


class DeviceBatches:
    """Tensors kept on the device, batched by a fresh permutation each epoch: no DataLoader, no host work."""

    def __init__(self, tensors: Sequence[torch.Tensor], batch_size: int, dev: torch.device, channels_last: bool,
                 seed: int, shuffle: bool, drop_last: bool, shard: ShardedBatches | None = None) -> None:
        self.tensors = [_to_device(t, dev, channels_last) for t in tensors]
        self.n = len(self.tensors[0])
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last and self.n >= batch_size
        self.gen = torch.Generator(device=dev).manual_seed(seed)
        self.dev = dev
        self.shard = shard  # several devices: this rank's part of each global batch

    def __len__(self) -> int:
        if self.shard is not None:
            return len(self.shard)
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        if self.shard is not None:  # the epoch's order (the same on every rank) moved once, then sliced
            order = self.shard.order().to(self.dev, non_blocking=True)
            for lo, hi in self.shard.spans():
                idx = order[lo:hi]
                yield tuple(t[idx] for t in self.tensors)
        elif self.shuffle:
            order = torch.randperm(self.n, device=self.dev, generator=self.gen)
            for i in range(0, len(self) * self.batch_size, self.batch_size):
                idx = order[i: i + self.batch_size]
                yield tuple(t[idx] for t in self.tensors)
        else:  # evaluation order: slices, no gather
            for i in range(0, len(self) * self.batch_size, self.batch_size):
                yield tuple(t[i: i + self.batch_size] for t in self.tensors)


class LoaderBatches:
    """A `DataLoader` (the trial's workers, pinned memory, prefetch); each batch moved to the device."""

    def __init__(self, loader: DataLoader, dev: torch.device, channels_last: bool) -> None:
        self.loader = loader
        self.dev = dev
        self.channels_last = channels_last

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            yield _to_device(batch, self.dev, self.channels_last)


class Batches:
    """What `ctx.loader` returns: iterate it for batches on the device. A training loader's iteration is
    timed (input wait, samples). `len()` is its batches per epoch, `.batch_size` and `.dataset` (the data after
    `data_fraction`) read as a DataLoader's do."""

    def __init__(self, ctx: TrialContext, inner: DeviceBatches | LoaderBatches, train: bool) -> None:
        self._ctx = ctx
        self._inner = inner
        self.train = train

    def __len__(self) -> int:
        return len(self._inner)

    @property
    def batch_size(self) -> int:
        inner = self._inner
        if isinstance(inner, DeviceBatches):
            return inner.batch_size
        return int(inner.loader.batch_size or getattr(inner.loader.batch_sampler, "batch_size", 1))

    @property
    def dataset(self) -> Dataset:
        """The data batched, after `data_fraction` (as a DataLoader's `.dataset`: `len(train.dataset)` samples):
        the Dataset given (a Subset of it), or a TensorDataset of the tensors (on the device with data_on_device)."""
        inner = self._inner
        if isinstance(inner, DeviceBatches):
            return TensorDataset(*inner.tensors)
        return inner.loader.dataset

    def __iter__(self) -> Iterator[Any]:
        return self._ctx._timed(self._inner) if self.train else iter(self._inner)

    def untimed(self) -> Iterable[Any]:
        """The same batches with no clock or counter (e.g. calibration after training)."""
        return self._inner


# ---------------------------------------------------------------- the context


class TrialContext:
    """One trial's settings, clocks and stop rules, for a training function `fit(ctx)`.

    Read: `params` (every setting and user parameter by name), `settings` (trainer settings only),
    `device`, `seed`, `epochs_total`, `batch_size` (the global batch), `precision`, `model` (the prepared,
    uncompiled model), `opt` (the optimizer `prepare` returned), `optimizer_factory` (the searched optimizer, as a
    factory of parameters -> torch.optim.Optimizer; `optimizer` is its deprecated old name),
    `rank` and `world_size` (0 and 1 unless the trial trains on several devices).
    Call: `prepare`, `loader`, `epochs`, `autocast`, `backward`, `report`; a training function may return a dict
    of final metrics (`result`).

    With `group` (several devices, distributed.py) the context is one rank's: `prepare` wraps the model in
    DistributedDataParallel, a training `loader` yields this rank's share of each global batch, samples and the
    training loss are summed over the ranks, clocks are read on every rank after a barrier (rank 0's are kept),
    and rank 0 alone applies the stop rules and sends records; its decision reaches every rank at the same step.
    """

    def __init__(self, settings: Mapping[str, Any], *, user_params: Mapping[str, Any] | None = None,
                 seed: int = 0, limits: Limits | None = None, on_record: OnEpoch | None = None,
                 on_epoch: OnEpoch | None = None, metrics: Iterable[str] | None = None,
                 early_stopping_on: Sequence[tuple[str, str]] = (("val_loss", "minimize"),),
                 chance_loss: float = math.inf, config: Any = None, group: Group | None = None,
                 probe: ProbeWindow | None = None, searched: Iterable[str] = (), fixed: Iterable[str] = ()) -> None:
        raw = self._raw = Settings(settings)
        # What this trial read (applied): the context's own uses and the training function's reads through
        # ctx.settings / ctx.params. A `searched` key nothing read is not_applied; a key `searched` or `fixed`
        # explicitly (not a default) is one the user chose (a searched lr scales a user-built optimizer's lrs).
        self._reads: set[str] = set(unread.APPLIED_AROUND)
        self._searched = tuple(searched)
        self._chosen = frozenset(self._searched) | frozenset(fixed)
        self.settings = raw.watched(self._reads)  # typed and frozen: ctx.settings["lr"] or ctx.settings.lr
        self.group = group
        self.rank = group.rank if group is not None else 0
        self.world_size = group.world if group is not None else 1
        self.params: Mapping[str, Any] = unread.WatchedParams(raw, user_params or {}, self._reads)
        self.seed = seed
        self.config = config  # the RunConfig of the study, when there is one
        self.device = accel.resolve_device(str(raw["device"]))
        self.chance_loss = chance_loss  # divergence: a loss above loss_factor x this is never "learning"
        self._accum = int(raw["grad_accum_steps"])
        self.limits = limits = limits or Limits()
        self._on_record = on_record  # sees every epoch's record first (the objective stores it)
        self._on_epoch = on_epoch  # the study's own stop rules (pruners, vs_front); may raise TrialStopped
        wall = limits.hang_seconds
        self._deadline = time.perf_counter() + wall if wall is not None else math.inf
        self._known = None if metrics is None else set(metrics)
        self._es_candidates = list(early_stopping_on)  # the first of these that is reported is watched
        self.not_applied: dict[str, str] = {}
        self.history: list[EpochRecord] = []
        self.model: nn.Module | None = None
        self._ddp: nn.Module | None = None  # the DistributedDataParallel wrapper (several devices)
        self.opt: torch.optim.Optimizer | None = None
        self.sched: torch.optim.lr_scheduler.LRScheduler | None = None
        self.scaler = accel.grad_scaler(self.device, str(raw["precision"]))
        self._own_optimizer: bool | None = None  # None: no ctx.prepare yet; True: the fit built its optimizer
        self._factory_used = False  # ctx.optimizer built an optimizer (the searched one)
        self._init_asked: bool | None = None  # ctx.prepare's init (None: not called)
        self._schedule_decided = False  # the first optimizer step decides: lr_schedule, or the fit's own scheduler
        self._own_scheduler = False  # a torch scheduler of the fit's own is on the optimizer: it alone steps the lr
        self._lr_set: list[float] | None = None  # the group lrs the context last set (scaled, or its schedule's)
        # watched for a fit that overwrites them only while a searched lr / lr_schedule could be found not applied
        self._lr_watch = bool({"lr", "lr_schedule"} & set(self._searched))
        self._stepped = False  # the context stepped the optimizer (ctx.backward)
        self._train_on_device: bool | None = None  # the training loader's batches: on the device (None: no loader)
        self.compile_time_s = 0.0
        self.stopped_early_at: int | None = None
        self.stop: TrialStopped | None = None
        self._compiled = False
        self._steps_per_epoch: int | None = None  # given to ctx.epochs (training without ctx.loader)
        self._train_loader_len: int | None = None
        # per-epoch state
        self.epoch = 0
        self._in_epoch = False  # inside the body of `for epoch in ctx.epochs()`
        self._epoch_open = False  # ... and its training clock still runs (no report yet)
        self._reported = False
        self._t0 = 0.0
        self._train_end: float | None = None  # the training data ran out (a loop with no ctx.backward)
        self._step_clock = accel.StepClock(self.device)  # when the epoch's last training step ended
        self._wait_s = 0.0
        self._samples = 0
        self._fetched = 0
        self._batch_n = 1
        self._fed = False  # a ctx.loader training batch was taken this epoch (else ctx.backward counts samples)
        self._unstepped = 0  # samples of the ctx.loader batch taken last, until a ctx.backward trains on it
        self._last_batch = False
        self._micro = 0  # micro-batches since the last optimizer step
        self._steps = 0  # micro-batches this epoch
        self._loss_sum: torch.Tensor | None = None
        self._loss_n = 0
        self._first_step: tuple[float, float] | None = None  # compile: (start, end) of the very first step
        self._train_time_s = 0.0
        self._best_es = math.inf
        self._since_best = 0
        # the speed probe's window (throughput.py): told of epochs and steps, may stop the run. One process's
        # view: a trial on several devices is not probed (a stop on rank 0 alone would strand the others)
        self._probe = probe if self.world_size == 1 else None

    # ------------------------------------------------------------ what the trial searched

    @property
    def precision(self) -> str:
        return str(self.settings["precision"])

    @property
    def epochs_total(self) -> int:
        return int(self.settings["epochs"])

    @property
    def batch_size(self) -> int:
        """The trial's (global) training batch size."""
        return int(self.settings["batch_size"])

    @property
    def optimizer(self) -> Callable[[Any], torch.optim.Optimizer]:
        """Deprecated: the factory is `optimizer_factory`; the optimizer itself is `opt`."""
        import warnings

        warnings.warn("ctx.optimizer is the searched optimizer's factory, not an optimizer: use ctx.optimizer_factory "
                      "(the optimizer ctx.prepare returned is ctx.opt)", DeprecationWarning, stacklevel=2)
        return self.optimizer_factory

    @property
    def optimizer_factory(self) -> Callable[[Any], torch.optim.Optimizer]:
        """The trial's optimizer (name, lr, momentum, weight decay, fused kernels) as a factory of parameters."""
        s = self.settings

        def build(params: Any) -> torch.optim.Optimizer:
            self._factory_used = True
            return make_optimizer(s["optimizer"], params, s, self.device)

        return build

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The trial's precision for the forward pass (fp32: a no-op)."""
        return accel.autocast(self.device, self.precision)

    # ------------------------------------------------------------ model and optimizer

    def prepare(self, model: nn.Module, optimizer: Any = None,
                init: bool = True) -> tuple[nn.Module, torch.optim.Optimizer]:
        """Apply the trial's settings to a model: weight init (`init=False` keeps loaded weights), device,
        channels_last, the optimizer (None: the searched one; a callable of parameters; or an optimizer),
        and torch.compile last. Returns (the model to train with, the optimizer); on several devices the model to
        train with is wrapped in DistributedDataParallel (then compiled), and `ctx.model` stays the plain module.

        An optimizer the fit built itself keeps its own groups and lrs; a searched (or fixed) `lr` multiplies each
        group's lr, unless the fit read `lr` itself (build a scheduler of your own after this call, so that it
        starts from the scaled lrs)."""
        self._check_live("ctx.prepare")
        if self.model is not None:
            raise ContextMisuse("ctx.prepare was already called in this trial: one model per trial")
        if not isinstance(model, nn.Module):
            raise ContextMisuse(f"ctx.prepare takes a torch.nn.Module; got {type(model).__name__}")
        s = self.settings
        self._init_asked = init
        if init and s["init"] != "default":
            from autotune.training._models import init_weights

            init_weights(model, s["init"])
        model = model.to(self.device)
        if s["channels_last"]:
            if any(isinstance(m, nn.Conv2d) for m in model.modules()):
                model = model.to(memory_format=torch.channels_last)
            else:
                self.not_applied["channels_last"] = "the model has no 2-D convolution"
        self.model = model
        if optimizer is None:
            optimizer = self.optimizer_factory
        if isinstance(optimizer, torch.optim.Optimizer):
            opt = optimizer
        elif callable(optimizer):
            opt = optimizer([p for p in model.parameters() if p.requires_grad])
            if not isinstance(opt, torch.optim.Optimizer):
                raise ContextMisuse(f"the optimizer factory given to ctx.prepare returned {type(opt).__name__}, "
                                    "not a torch.optim.Optimizer")
        else:
            raise ContextMisuse("ctx.prepare(model, optimizer): optimizer must be None, a torch.optim.Optimizer or a "
                                f"callable of parameters; got {type(optimizer).__name__}")
        self._own_optimizer = not self._factory_used
        # a chosen lr scales a fit-built optimizer's lrs, unless the fit read lr (it built with it: not twice)
        if self._own_optimizer and "lr" in self._chosen and "lr" not in self._reads:
            self._scale_lrs(opt, float(s["lr"]))
            if self._lr_watch:
                self._lr_set = _group_lrs(opt)
        self.opt = opt
        train_model = model
        if self.group is not None:  # weights broadcast from rank 0 here; gradients averaged every step
            train_model = self._ddp = self.group.wrap(model)
        if s["compile"]:  # (around the DDP wrapper: torch's DDPOptimizer splits the graph at its buckets)
            train_model = accel.compile_model(train_model, s["compile_mode"])
            self._compiled = True
        return train_model, opt

    @staticmethod
    def _scale_lrs(opt: torch.optim.Optimizer, factor: float) -> None:
        """A searched lr on an optimizer the fit built: each group's own lr times it (the groups' ratios hold)."""
        if any("initial_lr" in g for g in opt.param_groups):
            raise ContextMisuse("lr is searched: ctx.prepare scales your optimizer's group lrs by it, but a "
                                "learning-rate scheduler was already built on the optimizer and would restore the "
                                "unscaled ones; build your scheduler after ctx.prepare(model, optimizer)")
        for g in opt.param_groups:
            if isinstance(g["lr"], torch.Tensor):
                g["lr"].mul_(factor)
            else:
                g["lr"] = g["lr"] * factor

    # ------------------------------------------------------------ data

    def loader(self, data: Any, batch_size: int | None = None, shuffle: bool | None = None, train: bool = True,
               **dataloader_kwargs: Any) -> Batches:
        """Batches on the device, per the trial's settings.

        `data`: a tuple of tensors (x, y, ...), a TensorDataset, or any torch Dataset. Tensors with
        `data_on_device` live on the device and are batched by index (no DataLoader); otherwise a DataLoader
        with the trial's num_workers, pin_memory, prefetch_factor and persistent_workers. A training loader
        (train=True) takes the trial's batch_size, shuffles, uses `data_fraction` of the data, drops the last
        short batch when compiling (a new shape would recompile inside the timed epoch), and is timed.
        `train=False` (evaluation): eval_batch_size, in order, untimed.
        On several devices a training loader yields this rank's share of every global batch of `batch_size`
        (the same order on every rank, reshuffled each epoch); an evaluation loader is not split.
        """
        self._check_live("ctx.loader")
        s = self.settings
        bs = int(batch_size or (self.batch_size if train else s["eval_batch_size"]))
        shuffle = train if shuffle is None else shuffle
        drop_last = bool(dataloader_kwargs.pop("drop_last", train and self._compiled_setting))
        seed = self.seed
        tensors = _as_tensors(data)
        if train and s["data_fraction"] < 1.0:
            n = len(tensors[0]) if tensors is not None else _length(data)
            labels = tensors[1] if tensors is not None and len(tensors) > 1 else None
            keep = fraction_indices(n, s["data_fraction"], seed, labels)
            if keep is not None:
                if tensors is not None:
                    tensors = [t[keep] for t in tensors]
                else:
                    data = Subset(data, keep.tolist())
        channels_last = bool(s["channels_last"])
        if channels_last and train:
            x = tensors[0] if tensors is not None else None
            if x is not None and x.ndim != 4:
                self.not_applied.setdefault("channels_last", f"inputs are not 4-D images (shape {tuple(x.shape[1:])})")
        shard = None
        if train and self.group is not None:
            if tensors is None and isinstance(data, IterableDataset):
                raise ContextMisuse(f"ctx.loader: an IterableDataset cannot be split over devices "
                                    f"{self.world_size}: the ranks must see the same number of batches; give a "
                                    "map-style Dataset or tensors")
            n = len(tensors[0]) if tensors is not None else _length(data)
            if bs < self.world_size:
                raise ContextMisuse(f"ctx.loader: batch_size {bs} cannot be split over devices {self.world_size}")
            shard = ShardedBatches(n, bs, self.rank, self.world_size, seed, shuffle, drop_last)
        inner: DeviceBatches | LoaderBatches
        if tensors is not None and s["data_on_device"] and not dataloader_kwargs:
            inner = DeviceBatches(tensors, bs, self.device, channels_last, seed, shuffle, drop_last, shard)
        else:
            if s["data_on_device"] and train:
                self.not_applied["data_on_device"] = ("the data is a Dataset, not tensors: batches come from a "
                                                      "DataLoader" if tensors is None else
                                                      "DataLoader arguments were given to ctx.loader")
            dataset = TensorDataset(*tensors) if tensors is not None else data
            inner = LoaderBatches(self._dataloader(dataset, bs, shuffle, drop_last, dataloader_kwargs, shard),
                                  self.device, channels_last)
        if train and self._steps_per_epoch is None:
            self._train_loader_len = len(inner)
            self._train_on_device = isinstance(inner, DeviceBatches)
        return Batches(self, inner, train)

    @property
    def _compiled_setting(self) -> bool:
        return bool(self.settings["compile"])

    def _dataloader(self, dataset: Any, bs: int, shuffle: bool, drop_last: bool,
                    extra: dict[str, Any], shard: ShardedBatches | None = None) -> DataLoader:
        s = self.settings
        kwargs: dict[str, Any] = {"batch_size": bs, "num_workers": s["num_workers"],
                                  "pin_memory": bool(s["pin_memory"]) and self.device.type == "cuda",
                                  "drop_last": drop_last}
        if shard is not None:  # this rank's indices of each global batch
            del kwargs["batch_size"], kwargs["drop_last"]
            kwargs["batch_sampler"] = shard
        elif isinstance(dataset, IterableDataset):
            if shuffle:
                self.not_applied.setdefault("shuffle", "an IterableDataset is read in its own order")
        else:
            kwargs["shuffle"] = shuffle
            kwargs["generator"] = torch.Generator().manual_seed(self.seed)
        if s["num_workers"] > 0:  # DataLoader rejects these two without workers
            kwargs["prefetch_factor"] = s["prefetch_factor"]
            kwargs["persistent_workers"] = bool(s["persistent_workers"])
            if torch.cuda.is_initialized():  # a forked worker must not inherit a CUDA context
                kwargs["multiprocessing_context"] = "spawn"
        kwargs.update(extra)
        return DataLoader(dataset, **kwargs)

    def _timed(self, inner: Iterable[Any]) -> Iterator[Any]:
        """A training loader's batches: input wait and samples counted, the hang limit checked (here for a loop
        that steps without ctx.backward; ctx.backward checks it before each step, so a batch taken and never
        trained on, as a loop that breaks does, stops nothing), the trailing accumulation stepped when the data
        runs out."""
        if not self._fed and not self._steps and self._epoch_open:
            self._restart_clock()  # the epoch's training starts here: evaluation before it is not training
        it = iter(inner)
        n_left = len(inner) if hasattr(inner, "__len__") else -1  # type: ignore[arg-type]
        while True:
            tw = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            now = time.perf_counter()
            self._wait_s += now - tw
            if now > self._deadline and self.group is None and not self._steps:  # (several devices: in backward)
                raise self._stopped(self._hung())
            x = _first_tensor(batch)
            self._batch_n = len(x) if x is not None and x.ndim > 0 else 1
            self._unstepped = self._batch_n  # counted by the ctx.backward that trains on it
            self._fetched += self._batch_n  # (what counts when the loop steps its own optimizer, no ctx.backward)
            self._fed = True
            n_left -= 1
            self._last_batch = n_left == 0
            if self._ddp is not None and self._accum > 1:  # all-reduce only where the accumulation ends (no_sync)
                self._ddp.require_backward_grad_sync = self._micro + 1 >= self._accum or self._last_batch
            if self._compiled and self._first_step is None and self.epoch == 1:
                self._first_step = (accel.clock(self.device), math.nan)
            yield batch
        self._flush()
        self._train_end = self._clock_all()

    # ------------------------------------------------------------ epochs

    def epochs(self, steps_per_epoch: int | None = None) -> Iterator[int]:
        """1 .. epochs, each with its own training clock; stops early when early stopping says so.

        `steps_per_epoch`: the ctx.backward calls of one epoch, for a loop that does not iterate a training
        ctx.loader (its length says it otherwise): `lr_schedule` and the speed probe's projection need it.
        An epoch whose body did not call ctx.report is recorded with its clocks only."""
        self._check_live("ctx.epochs")
        if self.epoch:
            raise ContextMisuse("ctx.epochs() was already iterated in this trial: iterate it once")
        if steps_per_epoch is not None:
            if isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int) or steps_per_epoch < 1:
                raise ContextMisuse(f"ctx.epochs(steps_per_epoch=...): the ctx.backward calls of one epoch, an int "
                                    f">= 1; got {steps_per_epoch!r}")
            self._steps_per_epoch = self._train_loader_len = steps_per_epoch
        for epoch in range(1, self.epochs_total + 1):
            self._open_epoch(epoch)
            yield epoch
            try:
                if self.stop is not None:
                    raise self.stop
                if not self._reported:  # the body reported nothing: the epoch's clocks are its record
                    self.report()
            finally:
                self._in_epoch = False
            if self.stopped_early_at is not None:
                return

    def _clock_all(self) -> float:
        """The clock once every rank got here (the slowest rank's time): after a barrier on several devices."""
        if self.group is not None:
            self.group.barrier()
        return accel.clock(self.device)

    def _open_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._in_epoch = True
        self._epoch_open = True
        self._reported = False
        self._train_end = None
        self._wait_s = 0.0
        self._samples = 0
        self._fetched = 0
        self._fed = False
        self._steps = 0
        self._loss_sum = None
        self._loss_n = 0
        self._restart_clock()

    def _restart_clock(self) -> None:
        """The epoch's training clock (re)starts now: at the epoch's opening, and again when its first training
        batch is asked for (whatever the loop did before, evaluating say, is not training)."""
        self._t0 = self._clock_all()
        self._step_clock.start(self._t0)
        if self._probe is not None:
            self._probe.epoch_start(self.device, self._t0)

    # ------------------------------------------------------------ a step

    def backward(self, loss: torch.Tensor, n_samples: int | None = None) -> None:
        """Backward for one micro-batch: loss scaling (fp16), then every `grad_accum_steps` micro-batches (and
        at the end of the training data) gradient clipping, the optimizer step and the schedule step.

        The loss is divided by `grad_accum_steps` before its backward (the accumulated gradient is the mean over
        the micro-batches): pass the micro-batch's own mean loss. An unreduced loss (one value per sample) is
        averaged here. `n_samples`: the samples in this micro-batch, for a loop that does not take its batches
        from a training ctx.loader (which counts them); an unreduced loss gives them by its first dimension."""
        self._check_live("ctx.backward")
        if not self._in_epoch:
            raise ContextMisuse("ctx.backward outside `for epoch in ctx.epochs()`: the clocks and stop rules "
                                "count epochs")
        if not self._epoch_open:
            raise ContextMisuse(f"ctx.backward after ctx.report in epoch {self.epoch}: report once, after the "
                                "epoch's training steps")
        if self.opt is None:
            raise ContextMisuse("ctx.backward before ctx.prepare(model): the context steps the optimizer it made")
        if self._deadline != math.inf and time.perf_counter() > self._deadline and self.group is None:
            raise self._stopped(self._hung())
        n = self._step_samples(loss, n_samples)
        if loss.ndim:
            loss = loss.mean()
        if self._fed:  # a ctx.loader batch: counted once (by its first micro-step; a batch taken and not trained on
            added = self._unstepped  # is not counted)
            self._unstepped = 0
        else:  # no ctx.loader batch: this step's samples
            added = n
            if self._compiled and self._first_step is None and self.epoch == 1:
                self._first_step = (self._t0, math.nan)  # the first step started with the epoch
        self._samples += added
        accum = self._accum
        if self._loss_sum is None:  # summed on the device: no host sync per step
            self._loss_sum = loss.detach().float() * n
        else:
            self._loss_sum.add_(loss.detach(), alpha=n)
        self._loss_n += n
        scaled = loss / accum if accum > 1 else loss
        (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
        self._micro += 1
        self._steps += 1
        if self._micro >= accum or self._last_batch:
            self._optimizer_step()
        self._step_clock.mark()  # the epoch's training ends with its last step (no sync here)
        if self._first_step is not None and math.isnan(self._first_step[1]):
            self._first_step = (self._first_step[0], accel.clock(self.device))  # compile happened in this step
        if self._steps % FINITE_CHECK_EVERY == 0:
            self._check_steps()
        if self._probe is not None and not self._probe.done:
            try:
                self._probe.after_step(self.device, n, self._train_loader_len,
                                       float(self._raw["data_fraction"]))
            except TrialStopped as e:
                raise self._stopped(e) from None

    def _step_samples(self, loss: Any, n_samples: Any) -> int:
        """The samples of one ctx.backward: given, the first dimension of an unreduced loss, or the ctx.loader
        batch's; a loop of its own that gives none of these is refused (its samples/s would be steps/s)."""
        if not isinstance(loss, torch.Tensor):
            raise ContextMisuse(f"ctx.backward takes the loss tensor; got {type(loss).__name__}")
        if n_samples is not None:
            if isinstance(n_samples, bool) or not isinstance(n_samples, numbers.Integral) or n_samples < 1:
                raise ContextMisuse(f"ctx.backward(loss, n_samples=...): the samples in this micro-batch, an int "
                                    f">= 1; got {n_samples!r}")
            return int(n_samples)
        if loss.ndim:
            return int(loss.shape[0])
        if self._fed:
            return self._batch_n
        raise ContextMisuse("ctx.backward(loss): this step's batch did not come from a training ctx.loader, so its "
                            "samples are unknown: pass ctx.backward(loss, n_samples=len(x)) (or an unreduced loss, "
                            "one value per sample)")

    def _check_steps(self) -> None:
        """Every FINITE_CHECK_EVERY steps: a non-finite loss (and, on several devices, the hang limit: every
        rank learns what any rank saw, so all stop at this same step)."""
        assert self._loss_sum is not None
        nonfinite = not bool(torch.isfinite(self._loss_sum))
        late = False
        if self.group is not None:
            nonfinite, late = self.group.any([nonfinite, time.perf_counter() > self._deadline])
        if nonfinite:
            raise self._stopped(TrialStopped("diverged", self.epoch, "non-finite training loss"))
        if late:
            raise self._stopped(self._hung())

    def _hung(self) -> TrialStopped:
        return TrialStopped("slow", self.epoch - 1, f"trial wall time over hang_seconds {self.limits.hang_seconds:g} "
                                                    "(hung or far too slow)")

    def _optimizer_step(self) -> None:
        assert self.opt is not None
        s = self.settings
        if self._lr_set is not None and (self.sched is not None
                                         or not any("initial_lr" in g for g in self.opt.param_groups)):
            self._lr_overwritten()  # (a torch scheduler of the fit's own moves the lrs as it should: not checked)
        if not self._schedule_decided:
            self._schedule_decided = self._stepped = True
            self._reads.add("grad_accum_steps")  # (applied by ctx.backward from here on)
            self.sched = self._make_schedule()
        if s["grad_clip"] > 0:
            if self.scaler is not None:
                self.scaler.unscale_(self.opt)
            params = [p for g in self.opt.param_groups for p in g["params"]]
            nn.utils.clip_grad_norm_(params, s["grad_clip"])
        if self.scaler is not None:
            self.scaler.step(self.opt)  # skips the step (and lowers the scale) on inf/nan gradients
            self.scaler.update()
        else:
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.sched is not None:
            self.sched.step()
            if self._lr_watch:
                self._lr_set = _group_lrs(self.opt)
        self._micro = 0

    def _lr_overwritten(self) -> None:
        """The fit set the groups' lrs itself since the context did (nanoGPT's `group['lr'] = get_lr(it)`): the
        searched lr (and lr_schedule) it overwrote took no effect, whatever was read. Checked until it is seen."""
        assert self.opt is not None and self._lr_set is not None
        if _group_lrs(self.opt) == self._lr_set:
            return
        why = "your fit sets the optimizer's group lrs itself, overwriting what the context set"
        for key in ("lr", "lr_schedule"):
            if key in self._searched:
                self.not_applied.setdefault(key, why)
        self._lr_set, self._lr_watch = None, False  # seen once: no more work per step

    def _flush(self) -> None:
        """Gradients of a trailing partial accumulation are stepped at the end of the epoch's data."""
        if self._micro and self.opt is not None:
            self._optimizer_step()
            self._step_clock.mark()

    def _make_schedule(self) -> torch.optim.lr_scheduler.LRScheduler | None:
        """The trial's lr_schedule over each group's own lr (None: constant). A torch scheduler of the fit's own
        on the optimizer (torch's schedulers note each group's `initial_lr`) steps the lr alone: not both."""
        assert self.opt is not None
        if any("initial_lr" in g for g in self.opt.param_groups):
            self._own_scheduler = True
            return None
        s = self.settings
        if SCHEDULES[s["lr_schedule"]] is None:
            return None
        if self._train_loader_len is None:
            raise ContextMisuse(f"lr_schedule {s['lr_schedule']} needs the steps per epoch: iterate a "
                                "ctx.loader(...) for the training data, or give ctx.epochs(steps_per_epoch=...)")
        per_epoch = math.ceil(self._train_loader_len / int(s["grad_accum_steps"]))
        builder = SCHEDULES[s["lr_schedule"]]
        assert builder is not None
        return builder(self.opt, per_epoch * self.epochs_total)

    # ------------------------------------------------------------ per-epoch metrics and stop rules

    def report(self, **metrics: Any) -> None:
        """This epoch's metrics (floats or 0-d tensors): the stop rules decide here whether the trial goes on."""
        self._check_live("ctx.report")
        if not self._in_epoch:
            raise ContextMisuse("ctx.report outside `for epoch in ctx.epochs()`: report each epoch's metrics inside "
                                "the loop, once (final metrics after the loop: return them from fit as a dict)")
        if self._reported:
            raise ContextMisuse(f"ctx.report called twice in epoch {self.epoch}: report every metric in one call")
        values = self._check_metrics(metrics)
        epoch_time_s = self._epoch_time_s()
        self._train_time_s += epoch_time_s
        rec = self._record(values, epoch_time_s)
        self.history.append(rec)
        self._reported = True
        self._epoch_open = False
        # rank 0 alone records and decides (the only process, without several devices)
        stop = self._decide(rec, values) if self.rank == 0 else None
        if self.group is not None:
            stop = self._share_decision(stop)
        if stop is not None:
            raise self._stopped(stop) from None

    def _epoch_time_s(self) -> float:
        """This epoch's training seconds: up to the end of its last ctx.backward step, however the loop ended
        (its data ran out, it broke off, it had its own batches), so evaluation after it is not training; without
        a step, up to the end of the training data, else now. Less the first step's compile when
        `time_excludes_compile`. The speed probe sees the epoch end here (and may stop the trial, but not one
        whose training is complete: the last epoch's report)."""
        end = self._step_clock.last()
        if end is None:
            end = self._train_end if self._train_end is not None else self._clock_all()
        if self._probe is not None:
            try:
                self._probe.epoch_end(end)
            except ProbeDone as e:  # a probe of its own has its measurement: the run ends here
                raise self._stopped(e) from None
            except TrialStopped as e:
                if self.epoch < self.epochs_total:
                    raise self._stopped(e) from None
        epoch_time_s = max(0.0, end - self._t0)
        if self.epoch == 1 and self._first_step is not None and not math.isnan(self._first_step[1]):
            first = self._first_step[1] - self._first_step[0]
            typical = (epoch_time_s - first) / max(1, self._steps - 1) if self._steps > 1 else 0.0
            self.compile_time_s = max(0.0, first - typical)
            if self.settings["time_excludes_compile"]:
                epoch_time_s = max(0.0, epoch_time_s - self.compile_time_s)
        return epoch_time_s

    def _record(self, values: dict[str, float], epoch_time_s: float) -> EpochRecord:
        """The epoch's record; `train_loss` is the reported one (taken out of `values`) or the mean over the
        steps' losses."""
        # samples trained on by ctx.backward; a loop that steps its own optimizer: the training batches it took
        samples, loss_n = float(self._samples if self._steps else self._fetched), float(self._loss_n)
        loss_total = float(self._loss_sum) if self._loss_sum is not None else 0.0
        if self.group is not None:  # every rank's samples and training loss (the clocks are rank 0's)
            samples, loss_total, loss_n = self.group.sum([samples, loss_total, loss_n])
        if "train_loss" in values:
            train_loss = values.pop("train_loss")
        elif loss_n:
            train_loss = loss_total / loss_n
        else:
            train_loss = math.nan
        return EpochRecord(
            epoch=self.epoch, train_loss=train_loss, epoch_time_s=epoch_time_s, train_time_s=self._train_time_s,
            samples_per_s=samples / epoch_time_s if epoch_time_s > 0 else 0.0,
            data_wait_fraction=min(1.0, self._wait_s / epoch_time_s) if epoch_time_s > 0 else 0.0,
            lr=float(self.opt.param_groups[0]["lr"]) if self.opt is not None else math.nan, metrics=values,
        )

    def _decide(self, rec: EpochRecord, values: dict[str, float]) -> TrialStopped | None:
        """Rank 0's verdict on the epoch: the record goes out, early stopping is checked, then the stop rules and
        the caller's callback. An epoch that ends the training (the last, or the one early stopping ends at) is
        judged only for non-finite values: no rule discards training that is complete."""
        if self._on_record is not None:
            self._on_record(rec)
        self._early_stopping(values)
        final = self.stopped_early_at is not None or self.epoch >= self.epochs_total
        try:
            self._check_rules(rec, final)
            if self._on_epoch is not None:
                self._on_epoch(rec)
        except TrialStopped as e:
            if final and not e.detail.startswith("non-finite"):
                return None
            self.stopped_early_at = None
            return e
        return None

    def _share_decision(self, stop: TrialStopped | None) -> TrialStopped | None:
        """Rank 0's verdict on every rank: go on, stop early (the trial completes), or stop with rank 0's reason."""
        assert self.group is not None
        code = [0, 0, 0]
        if self.rank == 0 and stop is not None:
            code = [2, STOP_REASONS.index(stop.reason), stop.epoch]
        elif self.rank == 0 and self.stopped_early_at is not None:
            code = [1, 0, self.stopped_early_at]
        kind, reason, epoch = self.group.from_main(code)
        if kind == 1:
            self.stopped_early_at = epoch
        if kind == 2 and stop is None:
            stop = TrialStopped(STOP_REASONS[reason], epoch, "decided on rank 0")
        return stop

    def _check_rules(self, rec: EpochRecord, final: bool = False) -> None:
        """The rules that need only this trial: non-finite losses, then (before its last epoch) divergence and
        projected time."""
        if self._loss_n and not math.isfinite(rec.train_loss):
            raise TrialStopped("diverged", self.epoch, "non-finite training loss")
        for key, v in rec.metrics.items():
            if key.endswith("loss") and not math.isfinite(v):
                raise TrialStopped("diverged", self.epoch, f"non-finite {key}")
        if final:
            return
        losses = [r.train_loss for r in self.history]
        if self.limits.loss_factor is not None and all(math.isfinite(v) for v in losses):
            check_divergence(losses, self.limits.loss_factor, self.epoch, self.chance_loss)
        check_slow(rec.train_time_s, self.epoch, self.epochs_total, self.limits.max_trial_seconds)

    def _check_metrics(self, metrics: Mapping[str, Any], where: str = "ctx.report({key}=...)") -> dict[str, float]:
        """Reported (or returned: `where` names the place in the message) metrics as floats."""
        out: dict[str, float] = {}
        for key, value in metrics.items():
            at = where.format(key=key)
            if key in CLOCK_METRICS:
                raise ContextMisuse(f"{at}: {key} is measured by autotune; report what you evaluate")
            if self._known is not None and key not in self._known and key != "train_loss":
                from autotune.core._errors import one_of

                raise ContextMisuse(f"{at}: {key!r} is not an objective or a declared metric; "
                                    f"{one_of(self._reportable())} (declare more under `metrics:` in the YAML)")
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    raise ContextMisuse(f"{at}: a metric is one number; got a tensor of shape "
                                        f"{tuple(value.shape)}")
                value = value.item()
            try:
                out[key] = float(value)
            except (TypeError, ValueError):
                raise ContextMisuse(f"{at}: a metric is a number; got {type(value).__name__}") \
                    from None
        return out

    def _reportable(self) -> set[str]:
        """What a training function is offered to report: the study's objectives that it evaluates (not clocks, not
        what autotune measures on a model), its declared `metrics:`, train_loss and val_loss (early stopping's
        default); without a study, every name accepted but the clocks."""
        cfg = self.config
        if cfg is None or not hasattr(cfg, "objectives"):
            names = set(self._known or ())
        else:
            names = {o.metric for o in cfg.objectives} | set(cfg.metrics)
        # a user's own metric, or one of ours that a training function reports (not a clock, not measured on a model)
        evaluated = {n for n in names if (m := CATALOGUE.get(n)) is None or m.source == "reported"}
        return evaluated | {"train_loss", "val_loss"}

    def _early_stopping(self, values: Mapping[str, float]) -> None:
        """`early_stopping_patience` epochs without an improvement of the watched metric (val_loss by default)."""
        watched = next(((m, d) for m, d in self._es_candidates if m in values), None)
        if watched is None:  # (the setting is read, so used, only where a watched metric is reported)
            return
        patience = int(self.settings["early_stopping_patience"])
        if not patience:
            return
        v = values[watched[0]] if watched[1] == "minimize" else -values[watched[0]]
        if v < self._best_es - float(self.settings["early_stopping_min_delta"]):
            self._best_es, self._since_best = v, 0
        else:
            self._since_best += 1
        if self._since_best >= patience and self.epoch < self.epochs_total:
            self.stopped_early_at = self.epoch

    # ------------------------------------------------------------ misuse and stops

    def _stopped(self, stop: TrialStopped) -> TrialStopped:
        self.stop = stop
        self._epoch_open = False
        return stop

    def unapplied(self) -> dict[str, str]:
        """Settings that took no effect in this trial, with the reason: what the context could not apply, and every
        searched setting (or `user.` parameter) nothing read (unread.py says why)."""
        out = dict(self.not_applied)
        missed = [k for k in self._searched if k not in self._reads and k not in out]
        for key in missed:
            out[key] = unread.why(self, key, missed)
        return out

    def _check_live(self, what: str) -> None:
        if self.stop is not None:
            raise ContextMisuse(f"{what} after the trial was stopped ({self.stop}): let the stop exception "
                                "propagate out of your training function instead of catching it")

    def result(self, returned: Any = None) -> TrainResult:
        """The run's result once `fit` returned: the last epoch's metrics, then whatever fit returned (a dict)."""
        if not self.history:
            raise ContextMisuse("the training function returned without an epoch: iterate `for epoch in "
                                "ctx.epochs()` and ctx.report(...) each epoch")
        final = dict(self.history[-1].metrics)
        if returned is not None:
            if not isinstance(returned, Mapping):
                raise ContextMisuse(f"a training function returns None or a dict of final metrics; got "
                                    f"{type(returned).__name__}")
            final.update(self._check_metrics(returned, "the dict your fit returned, key {key!r}"))
        steady = self.history[1:] or self.history  # leave out epoch 1 (warm-up, compile) when there are others
        steady_time = sum(r.epoch_time_s for r in steady)
        steady_samples = sum(r.samples_per_s * r.epoch_time_s for r in steady)
        all_time = sum(r.epoch_time_s for r in self.history)
        return TrainResult(
            final=final, train_time_s=self._train_time_s,
            samples_per_s=steady_samples / steady_time if steady_time > 0 else 0.0,
            compile_time_s=self.compile_time_s,
            data_wait_fraction=sum(r.data_wait_fraction * r.epoch_time_s for r in self.history) / max(1e-12, all_time),
            epochs_run=len(self.history), device=accel.device_name(self.device), precision=self._raw["precision"],
            history=list(self.history), stopped_early_at=self.stopped_early_at,
            loss_scale=float(self.scaler.get_scale()) if self.scaler is not None else None,
            not_applied=self.unapplied(), model=self.model,
            model_params=sum(p.numel() for p in self.model.parameters()) if self.model is not None else 0,
        )


def _group_lrs(opt: torch.optim.Optimizer) -> list[float]:
    return [float(g["lr"]) for g in opt.param_groups]


def _as_tensors(data: Any) -> list[torch.Tensor] | None:
    """(x, y, ...) tensors or arrays of one length, or a TensorDataset; None for any other dataset."""
    import numpy as np

    if isinstance(data, TensorDataset):
        return list(data.tensors)
    if isinstance(data, (tuple, list)) and data and all(isinstance(t, (torch.Tensor, np.ndarray)) for t in data):
        tensors = [torch.as_tensor(t) for t in data]
        if len({len(t) for t in tensors}) != 1:
            raise ContextMisuse(f"ctx.loader: tensors of different lengths {[len(t) for t in tensors]}")
        return tensors
    if isinstance(data, Dataset):
        return None
    raise ContextMisuse(f"ctx.loader takes a tuple of tensors or a torch Dataset; got {type(data).__name__}")


def _length(data: Any) -> int:
    try:
        return len(data)
    except TypeError:
        raise ContextMisuse("data_fraction < 1 needs a dataset with a length") from None


@contextlib.contextmanager
def session(settings: Mapping[str, Any]) -> Iterator[None]:
    """Around one trial: backend flags set and restored, the compiler's caches reset before and after a
    compiled trial (a new model must compile afresh and report its compile time; graphs and CUDA-graph
    pools must not outlive their trial)."""
    compiled = bool(settings["compile"])
    if compiled:
        accel.reset_compiler()
    try:
        with accel.backend_flags(settings):
            yield
    finally:
        if compiled:
            accel.reset_compiler()


def unsupported(settings: Mapping[str, Any]) -> str | None:
    """Why this combination of acceleration settings cannot run as asked, before anything trains (else None)."""
    if settings["compile"] and settings["compile_mode"] in CUDA_GRAPH_MODES and settings["grad_accum_steps"] > 1:
        return (f"compile_mode {settings['compile_mode']} records CUDA graphs, whose gradients are overwritten on "
                f"replay: grad_accum_steps {settings['grad_accum_steps']} cannot accumulate there")
    if settings["batch_size"] < settings["devices"]:
        return (f"batch_size {settings['batch_size']} cannot be split over devices {settings['devices']}: batch_size "
                "is the global batch, at least one sample per device")
    return None


def run(fit: Callable[[TrialContext], Any], ctx: TrialContext) -> TrainResult:
    """Run a training function on a context (inside `session`) and return what it measured."""
    returned = fit(ctx)
    if ctx.stop is not None:  # the function caught a stop and returned: the trial still stopped
        raise ctx.stop
    return ctx.result(returned)


__all__ = ["Batches", "ContextMisuse", "EpochRecord", "OnEpoch", "TrainResult", "TrialContext", "run", "session",
           "unsupported"]
