"""`train(job, on_epoch) -> TrainResult`: one readable training loop. No Optuna here.

The loop keeps the device busy: data already on the device, losses summed on the
device and read once per epoch (no per-step host sync), `zero_grad(set_to_none=True)`,
fused/foreach optimizers where the device has them, evaluation under
`inference_mode` with a large batch. Clocks are read after a device synchronize.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from . import accel, data, models
from .config import DataConfig, DistillConfig, ModelConfig
from .errors import TrialStopped


@dataclass(frozen=True)
class TrainJob:
    """Everything one training run needs: resolved settings, data and model configs, a seed."""

    settings: dict[str, Any]
    data: DataConfig
    model: ModelConfig
    seed: int = 0
    source: str = "<config>"
    wall_limit_s: float | None = None  # a trial still running after this many seconds is stopped as hung
    distill: DistillConfig | None = None
    measure_inference: bool = True  # size / latency / nonzero metrics even when nothing is compressed


@dataclass
class EpochRecord:
    epoch: int
    train_loss: float
    val_loss: float
    val_accuracy: float
    epoch_time_s: float  # training time of this epoch (no evaluation)
    train_time_s: float  # cumulative, compile included unless time_excludes_compile
    samples_per_s: float
    data_wait_fraction: float
    lr: float


@dataclass
class TrainResult:
    val_accuracy: float
    val_loss: float
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
    model: nn.Module | None = field(default=None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)  # further metrics (compression)
    compressed_model: nn.Module | None = field(default=None, repr=False)  # pruned/quantized copy of `model`

    def metrics(self) -> dict[str, float]:
        out = {k: getattr(self, k) for k in ("val_accuracy", "val_loss", "train_time_s", "samples_per_s",
                                             "compile_time_s", "data_wait_fraction")}
        out.update(self.extra)
        return out

    def history_dicts(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.history]


OnEpoch = Callable[[EpochRecord], None]


def make_optimizer(name: str, params: Any, s: dict[str, Any], dev: torch.device) -> torch.optim.Optimizer:
    lr, wd, mom = s["lr"], s["weight_decay"], s["momentum"]
    # fused kernels: one launch for the whole update (CUDA; Adam/AdamW/SGD also on CPU)
    fast: dict[str, Any] = {"fused": True} if dev.type in ("cuda", "cpu") else {"foreach": True}
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=mom, weight_decay=wd, **fast)
    if name == "sgd_nesterov":  # Nesterov needs momentum > 0: with 0 it is plain SGD
        return torch.optim.SGD(params, lr=lr, momentum=mom, nesterov=mom > 0, weight_decay=wd, **fast)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd, **fast)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd, **fast)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, momentum=mom, weight_decay=wd,
                                   foreach=dev.type != "cpu" or None)
    raise ValueError(f"unknown optimizer {name!r}")


def make_schedule(name: str, opt: torch.optim.Optimizer, lr: float,
                  total_steps: int) -> torch.optim.lr_scheduler.LRScheduler | None:
    if name == "constant":
        return None
    if name == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, total_steps))
    if name == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=max(2, total_steps))
    raise ValueError(f"unknown lr_schedule {name!r}")


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, dev: torch.device,
             precision: str, channels_last: bool) -> tuple[float, float]:
    """Mean cross-entropy and accuracy on (x, y), summed on the device and read once."""
    model.eval()
    loss_sum = torch.zeros((), device=dev)
    correct = torch.zeros((), device=dev, dtype=torch.long)
    with torch.inference_mode(), accel.autocast(dev, precision):
        for i in range(0, len(y), batch_size):
            xb, yb = x[i: i + batch_size], y[i: i + batch_size]
            if channels_last and xb.ndim == 4:
                xb = xb.contiguous(memory_format=torch.channels_last)
            logits = model(xb).float()
            loss_sum += nn.functional.cross_entropy(logits, yb, reduction="sum")
            correct += (logits.argmax(1) == yb).sum()
    n = max(1, len(y))
    return float(loss_sum) / n, float(correct) / n


def train(job: TrainJob, on_epoch: OnEpoch | None = None) -> TrainResult:
    """Train one configuration; `on_epoch` sees each epoch's record and may raise TrialStopped."""
    s = job.settings
    deadline = time.perf_counter() + job.wall_limit_s if job.wall_limit_s is not None else math.inf
    dev = accel.resolve_device(s["device"])
    from . import compress  # compression settings that cannot run here end the trial before it trains

    bad = compress.unsupported(s, dev)
    if bad is not None:
        raise TrialStopped("unsupported", 0, f"{bad[0]}: {bad[1]}")
    with accel.backend_flags(s):
        torch.manual_seed(job.seed)
        ds = data.load(job.data, job.source)
        x_train, y_train = data.subset(ds.x_train, ds.y_train, s["data_fraction"], job.seed)
        channels_last = bool(s["channels_last"]) and x_train.ndim == 4
        batches: data.DeviceBatches | data.LoaderBatches
        if s["data_on_device"]:
            batches = data.DeviceBatches(x_train, y_train, s["batch_size"], dev, channels_last, job.seed)
        else:
            batches = data.LoaderBatches(x_train, y_train, s["batch_size"], dev, channels_last, job.seed,
                                         s["num_workers"], s["pin_memory"], s["prefetch_factor"],
                                         s["persistent_workers"])
        x_val, y_val = ds.x_val.to(dev), ds.y_val.to(dev)

        file = job.source.rsplit("/", 1)[-1]
        model = models.build(job.model, ds.input_shape, ds.n_classes, s["dropout"], s["init"], file).to(dev)
        if job.model.checkpoint is not None:
            from .compress import load_checkpoint  # transfer learning: optional, kept out of the hot path

            load_checkpoint(model, job.model.checkpoint, job.source, s.get("freeze", "none"))
        teacher = compress.load_teacher(job.distill, job.model, ds.input_shape, ds.n_classes, dev, job.source,
                                        channels_last) if job.distill is not None else None
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        accum = s["grad_accum_steps"]
        steps_per_epoch = math.ceil(len(batches) / accum)
        opt = make_optimizer(s["optimizer"], [p for p in model.parameters() if p.requires_grad], s, dev)
        sched = make_schedule(s["lr_schedule"], opt, s["lr"], steps_per_epoch * s["epochs"])
        scaler = accel.grad_scaler(dev, s["precision"])
        loss_fn = nn.CrossEntropyLoss(label_smoothing=s["label_smoothing"])
        step_model = accel.compile_model(model, s["compile_mode"]) if s["compile"] else model

        def step(xb: torch.Tensor, yb: torch.Tensor, scale: float) -> torch.Tensor:
            with accel.autocast(dev, s["precision"]):
                logits = step_model(xb).float()
                loss = loss_fn(logits, yb)
                if teacher is not None:  # knowledge distillation: match the teacher's softened predictions too
                    loss = compress.distill_loss(loss, logits, teacher, xb, job.distill)
            (scaler.scale(loss * scale) if scaler else loss * scale).backward()
            return loss.detach()

        # One-time cost, kept visible but separate: compile fwd+bwd graphs on a real batch,
        # then put the weights back so the warm-up step does not count as training.
        compile_time_s = 0.0
        if s["compile"]:
            state = copy.deepcopy(model.state_dict())
            xb, yb = next(iter(batches))
            t0 = accel.clock(dev)
            step(xb, yb, 1.0)
            compile_time_s = accel.clock(dev) - t0
            model.load_state_dict(state)
            opt.zero_grad(set_to_none=True)
        train_time_s = 0.0 if s["time_excludes_compile"] else compile_time_s

        history: list[EpochRecord] = []
        n_train = len(y_train)
        best_val_loss, since_best, stopped_early_at = math.inf, 0, None
        for epoch in range(1, s["epochs"] + 1):
            model.train()
            loss_sum = torch.zeros((), device=dev)
            wait_s = 0.0
            n_batches = 0
            t0 = accel.clock(dev)
            it = iter(batches)
            while True:
                tw = time.perf_counter()
                try:
                    xb, yb = next(it)
                except StopIteration:
                    break
                now = time.perf_counter()
                wait_s += now - tw
                if now > deadline:  # one clock read per step: cheap, and safe (no async exception)
                    raise TrialStopped("slow", epoch - 1, f"trial wall time over hang_seconds {job.wall_limit_s:g}"
                                                          " (hung or far too slow)")
                n_batches += 1
                loss_sum += step(xb, yb, 1.0 / accum) * len(yb)
                if n_batches % accum == 0 or n_batches == len(batches):
                    if s["grad_clip"] > 0:
                        if scaler:
                            scaler.unscale_(opt)
                        nn.utils.clip_grad_norm_(model.parameters(), s["grad_clip"])
                    if scaler:
                        scaler.step(opt)  # skips the step (and lowers the scale) on inf/nan gradients
                        scaler.update()
                    else:
                        opt.step()
                    opt.zero_grad(set_to_none=True)
                    if sched is not None:
                        sched.step()
                if n_batches % 64 == 0 and not torch.isfinite(loss_sum):  # rare sync: stop a blow-up early
                    raise TrialStopped("diverged", epoch, "non-finite training loss")
            epoch_time_s = accel.clock(dev) - t0
            train_time_s += epoch_time_s
            train_loss = float(loss_sum) / max(1, n_train)
            if not math.isfinite(train_loss):
                raise TrialStopped("diverged", epoch, "non-finite training loss")
            val_loss, val_acc = evaluate(model, x_val, y_val, s["eval_batch_size"], dev, s["precision"],
                                         channels_last)
            if not math.isfinite(val_loss):
                raise TrialStopped("diverged", epoch, "non-finite validation loss")
            rec = EpochRecord(
                epoch=epoch, train_loss=train_loss, val_loss=val_loss, val_accuracy=val_acc,
                epoch_time_s=epoch_time_s, train_time_s=train_time_s,
                samples_per_s=n_train / epoch_time_s if epoch_time_s > 0 else 0.0,
                data_wait_fraction=wait_s / epoch_time_s if epoch_time_s > 0 else 0.0,
                lr=float(opt.param_groups[0]["lr"]),
            )
            history.append(rec)
            if on_epoch is not None:
                on_epoch(rec)
            # Early stopping: val_loss has not improved by min_delta for `patience` epochs.
            if val_loss < best_val_loss - s["early_stopping_min_delta"]:
                best_val_loss, since_best = val_loss, 0
            else:
                since_best += 1
            if s["early_stopping_patience"] and since_best >= s["early_stopping_patience"] and epoch < s["epochs"]:
                stopped_early_at = epoch
                break

        # Compression of a copy (prune + fine-tune, quantize), then what it costs and gains, measured.
        def finetune(m: nn.Module, n_epochs: int) -> float:
            ft_opt = make_optimizer(s["optimizer"], [p for p in m.parameters() if p.requires_grad],
                                    {**s, "lr": s["lr"] * compress.FINETUNE_LR_FACTOR}, dev)
            return compress.finetune_loop(m, n_epochs, batches, ft_opt, loss_fn, dev, s["precision"])

        compressing = s["prune_method"] != "none" or s["quantize"] != "none" or s["qat"]
        packed = None
        if compressing or job.measure_inference:
            packed = compress.compress_and_measure(model, s, dev, compress.calibration_batches(batches), x_val,
                                                   y_val, history[-1].val_accuracy, history[-1].val_loss, finetune,
                                                   len(history))
            train_time_s += packed.finetune_time_s

    # Steady state: leave out the first epoch (allocator and kernel warm-up) when there are others.
    steady = history[1:] or history
    steady_time = sum(r.epoch_time_s for r in steady)
    return TrainResult(
        val_accuracy=packed.val_accuracy if packed else history[-1].val_accuracy,
        val_loss=packed.val_loss if packed else history[-1].val_loss, train_time_s=train_time_s,
        samples_per_s=n_train * len(steady) / steady_time if steady_time > 0 else 0.0,
        compile_time_s=compile_time_s,
        data_wait_fraction=sum(r.data_wait_fraction * r.epoch_time_s for r in history) / max(
            1e-12, sum(r.epoch_time_s for r in history)),
        epochs_run=len(history), device=accel.device_name(dev), precision=s["precision"], history=history,
        stopped_early_at=stopped_early_at, loss_scale=float(scaler.get_scale()) if scaler else None, model=model,
        extra=packed.extra if packed else {}, compressed_model=packed.model if packed else None,
    )
