"""`train(plan, fit, ...) -> TrainResult`: one training run, built-in or the user's, on a trial context. No Optuna here.

The built-in trainer is an ordinary `fit(ctx)` (`BuiltinFit`) over the configured data and model, so it
shares every setting, clock and stop rule with users' training functions. It keeps the device busy: data
on the device, losses summed on the device and read once per epoch, evaluation under `inference_mode`
with a large batch. Steps on the trained model (pruning, quantization, their measurements) run after
`fit` returns (`BuiltinFit.after_fit`), never inside the loop.

With `devices` > 1 the same training runs on every rank of a process group (`distributed.launch`); this process
only watches, and rank 0's records reach `on_record` / `on_epoch` here.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from autotune import compress
from autotune.core import TrialStopped
from autotune.spec import Settings
from autotune.training import (
    Batches,
    EpochRecord,
    OnEpoch,
    ProbeWindow,
    TrainingPlan,
    TrainResult,
    TrialContext,
    TrialPort,
    accel,
    augment,
    data,
    distributed,
    models,
    run_fit,
    tasks,
    trial_session,
    unsupported_combination,
)

Fit = Callable[[TrialContext], Any]


def train(plan: TrainingPlan, fit: Fit | None = None, *, probe: ProbeWindow | None = None,
          on_epoch: OnEpoch | None = None, on_record: OnEpoch | None = None, keep_model: bool = True,
          launch: bool | None = None) -> TrainResult:
    """Train one plan with `fit` (None: the built-in trainer); `probe` times its first steps (the speed probe);
    `on_record` sees each epoch's record, `on_epoch` may raise TrialStopped.

    `devices` > 1 trains on that many ranks (`launch` None); `launch=True` goes through the launcher even for one
    device (a bench measures DDP's own cost with it). `keep_model=False`: a study needs the metrics, not the
    trained model, which several devices would otherwise send back from rank 0."""
    s = plan.settings
    why = unsupported_combination(s)
    if why is not None:
        raise TrialStopped("unsupported", 0, why)
    if fit is None:  # compression settings that cannot run here end the trial before it trains
        bad = compress.unsupported(s, plan.device)
        if bad is not None:
            raise TrialStopped("unsupported", 0, f"{bad[0]}: {bad[1]}")
    world = int(s.devices)
    if launch is None:
        launch = world > 1
    if not launch:
        return train_here(plan, fit, probe=probe, on_epoch=on_epoch, on_record=on_record)
    launched: tuple[TrainResult, bytes | None] = distributed.launch(
        _rank, (plan, fit, keep_model), world, plan.device, on_record=on_record, on_epoch=on_epoch,
        hang_seconds=plan.limits.hang_seconds)
    result, blob = launched
    if blob is not None:  # rank 0's trained model (and its compressed copy), where rank 0 had them (cuda:0, cpu)
        result.model, result.compressed_model = torch.load(io.BytesIO(blob), weights_only=False)
    result.device = f"{world} x {result.device}"
    return result


def train_here(plan: TrainingPlan, fit: Fit | None = None, group: distributed.Group | None = None, *,
               probe: ProbeWindow | None = None, on_epoch: OnEpoch | None = None,
               on_record: OnEpoch | None = None) -> TrainResult:
    """Train in this process: the only one, or one rank of several (`group`); steps after `fit` run on rank 0."""
    builtin = BuiltinFit(plan) if fit is None else None
    with trial_session(plan):
        accel.seed_all(plan.seed)
        ctx = TrialContext(plan, group=group, probe=probe, on_record=on_record, on_epoch=on_epoch)
        after = (lambda result: builtin.after_fit(ctx, result)) if builtin is not None and ctx.rank == 0 else None
        return run_fit(builtin if builtin is not None else fit, ctx, after)  # type: ignore[arg-type]


def _rank(payload: tuple[TrainingPlan, Fit | None, bool], group: distributed.Group, on_epoch: OnEpoch | None,
          on_record: OnEpoch | None) -> tuple[TrainResult, bytes | None] | None:
    """One rank of a several-device trial (run by distributed.launch): its own device, then rank 0's result with
    the trained models as torch.save bytes (tensors by value: this process ends next)."""
    plan, fit, keep_model = payload
    result = train_here(plan.on(group.device), fit, group, on_epoch=on_epoch, on_record=on_record)
    if group.rank != 0:
        return None
    blob = None
    if keep_model:
        buf = io.BytesIO()
        torch.save((result.model, result.compressed_model), buf)
        blob = buf.getvalue()
    result.model = result.compressed_model = None
    return result, blob


def train_epoch(ctx: TrialContext, model: nn.Module, batches: Iterable[Any],
                inputs: Callable[[torch.Tensor], torch.Tensor],
                loss_of: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """One pass over the training batches through the context: each batch's inputs made model-ready
    (normalized, augmented: on the device), then autocast, backward, step."""
    model.train()
    for xb, yb in batches:
        xb = inputs(xb)
        with ctx.autocast():
            out = model(xb).float()
            loss = loss_of(out, yb, xb)
        ctx.backward(loss)


class BuiltinFit:
    """autotune's own training function: the configured dataset and model (with the trial's `model.*`
    keys), the task's loss (cross-entropy with label smoothing and, with `distill`, a teacher's soft
    targets; or mean squared error), on-device normalization and augmentation, the task's validation
    metrics each epoch."""

    def __init__(self, plan: TrainingPlan) -> None:
        assert plan.config is not None, "the built-in trainer trains a config's data and model"
        self.plan = plan
        self.cfg = plan.config
        self.file = plan.config.file
        self.ds: data.Dataset | None = None
        self.batches: Batches | None = None
        self.val: tuple[torch.Tensor, torch.Tensor] | None = None

    def loss(self, ctx: TrialContext, teacher: nn.Module | None) -> Callable[..., torch.Tensor]:
        assert self.ds is not None
        base = tasks.loss_fn(self.ds, ctx.settings["label_smoothing"])
        distill = self.cfg.distill
        if teacher is None or distill is None:
            return lambda out, yb, xb: base(out, yb)
        # knowledge distillation: match the teacher's softened predictions too
        return lambda out, yb, xb: compress.distill_loss(base(out, yb), out, teacher, xb, distill)

    def __call__(self, ctx: TrialContext) -> None:
        cfg, s = self.cfg, ctx.settings
        ds = self.ds = data.load(cfg.data, cfg.source, cfg.task)
        TrialPort(ctx).chance_loss(tasks.chance_loss(ds))  # a guess's loss: the divergence rule's ceiling
        model = models.build_for(cfg.model, s, ds.input_shape, ds.n_outputs, s["dropout"], "default", self.file)
        checkpoint = cfg.model.checkpoint
        loaded = checkpoint is not None
        if checkpoint is not None:  # transfer learning: the checkpoint's weights, not the init scheme's
            compress.load_checkpoint(model, checkpoint, cfg.source, s["freeze"])
        model, _ = ctx.prepare(model, init=not loaded)
        teacher = None
        if cfg.distill is not None:
            channels_last = bool(s["channels_last"]) and len(ds.input_shape) == 3
            teacher = compress.load_teacher(cfg.distill, cfg.model, ds.input_shape, ds.n_outputs, ctx.device,
                                            cfg.source, channels_last)
        x_train, y_train, x_val, y_val = ds.on(ctx.device)  # copied to the device once per process
        if not s["data_on_device"]:  # a DataLoader batches host tensors (its workers cannot take device ones)
            x_train, y_train = ds.x_train, ds.y_train
        self.batches = ctx.loader((x_train, y_train))  # uint8 images stay uint8 on the device
        self.val = (x_val, y_val)
        # each rank draws its own augmentations (its data differs too); one device keeps the trial's seed
        gen = augment.generator(ctx.device, ctx.seed + 1_000_003 * ctx.rank) if augment.enabled(s) else None

        def inputs(xb: torch.Tensor) -> torch.Tensor:
            xb = ds.normalize(xb)
            return augment.apply(xb, s, gen) if gen is not None else xb

        loss_of = self.loss(ctx, teacher)
        assert ctx.model is not None
        for _ in ctx.epochs():
            train_epoch(ctx, model, self.batches, inputs, loss_of)
            if ctx.rank > 0:  # rank 0's metrics are the trial's: the others wait for its verdict
                ctx.report()
                continue
            # the uncompiled module: no eval-mode recompile
            ctx.report(**tasks.evaluate(ctx.model, ds, *self.val, int(s["eval_batch_size"]), ctx.device,
                                        str(s["precision"]), bool(s["channels_last"])))

    def after_fit(self, ctx: TrialContext, result: TrainResult) -> None:
        """Compression of a copy (prune + fine-tune, quantize), then what it costs and gains, measured."""
        s = ctx.settings
        compressing = s["prune_method"] != "none" or s["quantize"] != "none" or s["qat"]
        if not (compressing or self.plan.measure_inference):
            return
        assert self.batches is not None and self.val is not None and self.ds is not None and result.model is not None
        ds, batches = self.ds, self.batches
        calibration = ((ds.normalize(xb), yb) for xb, yb in batches.untimed())
        x_val, y_val = ds.normalize(self.val[0]), self.val[1]

        def finetune(model: nn.Module, epochs: int, qat: bool = False) -> float:
            return self.finetune(ctx, model, epochs, qat)

        # (the trial's own settings: what compression reads is noted one by one; a copy counted every one as read)
        packed = compress.compress_and_measure(
            result.model, s, ctx.device, compress.calibration_batches(calibration), ds, x_val, y_val,
            result.val_accuracy, result.val_loss, finetune, result.epochs_run)
        result.final.update(val_accuracy=packed.val_accuracy, val_loss=packed.val_loss)
        result.train_time_s += packed.finetune_time_s
        result.extra.update(packed.extra)
        result.compressed_model = packed.model

    def finetune(self, ctx: TrialContext, model: nn.Module, epochs: int, qat: bool = False) -> float:
        """Epochs of training after pruning (masks held) or for QAT, through a context of their own: the same
        loop, the same optimizer at FINETUNE_LR_FACTOR x lr, constant. QAT runs in fp32: the fused fake-quant
        kernels have no half-precision path on CUDA. Returns the seconds spent."""
        s = ctx.settings
        assert self.ds is not None
        ds = self.ds
        # a copy of the plan's settings: a copy of the watched ctx.settings would count every setting as read
        ft: dict[str, Any] = {**self.plan.settings, "lr": s["lr"] * compress.FINETUNE_LR_FACTOR,
                              "lr_schedule": "constant",
                              "epochs": epochs, "compile": False, "early_stopping_patience": 0,
                              "precision": "fp32" if qat else s["precision"]}
        # (a bare context's plan, on the trial's device and threads: nothing is resolved again)
        fplan = TrainingPlan(settings=Settings(ft), device=self.plan.device, threads=self.plan.threads, seed=ctx.seed)

        def fine_tune(fctx: TrialContext) -> None:
            prepared, _ = fctx.prepare(model, init=False)
            batches = fctx.loader((ds.x_train, ds.y_train))
            loss_of = self.loss(fctx, None)
            for _ in fctx.epochs():
                train_epoch(fctx, prepared, batches, ds.normalize, loss_of)
                fctx.report()

        return run_fit(fine_tune, TrialContext(fplan)).train_time_s


__all__ = ["BuiltinFit", "EpochRecord", "Fit", "TrainResult", "train", "train_epoch", "train_here"]
