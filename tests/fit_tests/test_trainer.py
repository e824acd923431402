"""The trainer learns for real, and every acceleration setting really takes effect."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from autotune import config
from autotune.core.errors import TrialStopped
from autotune.fit import TrainingPlan, TrialPlan, trainer
from autotune.spec.settings import PRECISIONS
from autotune.training.context import loaders
from autotune.training.context import trial as context
from autotune.training.data import registry as data
from autotune.training.models import INITS
from autotune.training.optimizers import OPTIMIZERS
from tests import factories


def job(model: dict | None = None, data: dict | None = None, **settings) -> TrainingPlan:
    """The training half of a run's plan (no study limits, nothing chosen, inference measured)."""
    cfg = config.from_dict({"model": model or {"name": "cnn", "channels": [8, 16], "hidden": 32},
                            "data": data or {"name": "digits"}})
    s = cfg.fixed()
    s.update({"epochs": 2, "batch_size": 128, **settings})
    return TrialPlan.of(cfg, s, 0, fixed=frozenset(), study_rules=False, measure_inference=True).training


def test_learns_digits() -> None:
    r = trainer.train(job(model={"name": "cnn"}, epochs=4, batch_size=64, lr=3e-3))
    assert r.val_accuracy >= 0.95
    assert r.epochs_run == 4 and len(r.history) == 4
    assert r.train_time_s == pytest.approx(sum(h.epoch_time_s for h in r.history))
    assert r.samples_per_s > 0 and 0 <= r.data_wait_fraction < 1
    assert r.history[-1].train_loss < r.history[0].train_loss


def train_seeing_the_optimizer(monkeypatch: pytest.MonkeyPatch, j: TrainingPlan
                               ) -> tuple[trainer.TrainResult, torch.optim.Optimizer]:
    """The built-in trainer's run, and the optimizer its trial context built (the first prepare: the training)."""
    seen: list[torch.optim.Optimizer] = []
    real = context.TrialContext.prepare

    def prepare(self: context.TrialContext, *args: Any, **kwargs: Any) -> Any:
        model, opt = real(self, *args, **kwargs)
        seen.append(opt)
        return model, opt

    monkeypatch.setattr(context.TrialContext, "prepare", prepare)
    return trainer.train(j), seen[0]


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_every_optimizer_trains(optimizer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lr = 0.01 if optimizer.startswith("sgd") else 2e-3
    r, opt = train_seeing_the_optimizer(monkeypatch, job(optimizer=optimizer, lr=lr, epochs=3, momentum=0.8,
                                                         weight_decay=1e-4))
    want = {"sgd": torch.optim.SGD, "sgd_nesterov": torch.optim.SGD, "adam": torch.optim.Adam,
            "adamw": torch.optim.AdamW, "rmsprop": torch.optim.RMSprop}[optimizer]
    assert type(opt) is want
    group = opt.param_groups[0]
    assert group["weight_decay"] == 1e-4 and group["lr"] == pytest.approx(lr)  # constant schedule: lr unchanged
    assert group.get("momentum", 0.8) == 0.8 and group.get("nesterov", False) == (optimizer == "sgd_nesterov")
    trained = {id(p) for g in opt.param_groups for p in g["params"]}
    assert trained == {id(p) for p in r.model.parameters()}  # every weight of the trained model, once
    assert r.val_accuracy > 0.5, optimizer


@pytest.mark.parametrize("init", INITS)
def test_every_init_trains_and_changes_weights(init: str) -> None:
    from autotune.training import models

    torch.manual_seed(0)
    a = models.build(config.ModelConfig(), (1, 8, 8), 10, 0.0, "default")
    torch.manual_seed(0)
    b = models.build(config.ModelConfig(), (1, 8, 8), 10, 0.0, init)
    same = torch.equal(a[0].weight, b[0].weight)
    assert same == (init == "default")
    if init != "default":
        assert all(float(m.bias.detach().abs().sum()) == 0 for m in b.modules() if isinstance(m, torch.nn.Linear))
    assert trainer.train(job(init=init, lr=3e-3, epochs=3)).val_accuracy > 0.5


@pytest.mark.parametrize("model", [{"name": "cnn", "channels": [8]}, {"name": "mlp", "hidden": 32},
                                   {"factory": "tests.factories:small_net", "kwargs": {"width": 16}}])
def test_every_model_trains(model: dict) -> None:
    assert trainer.train(job(model=model, epochs=3, lr=1e-2)).val_accuracy > 0.5


@pytest.mark.parametrize("precision", PRECISIONS)
def test_precision_really_used(precision: str) -> None:
    r = trainer.train(job(model={"factory": "tests.factories:probe"}, precision=precision, epochs=1))
    want = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    assert {p["conv_dtype"] for p in factories.PROBE} == {want}
    assert (r.loss_scale is not None) == (precision == "fp16")  # GradScaler only for fp16
    assert r.precision == precision


@pytest.mark.parametrize("on_device", [True, False])
def test_channels_last_reaches_the_model(on_device: bool) -> None:
    rgb = {"name": "synthetic", "shape": [3, 8, 8], "n_samples": 256}  # 1-channel images look the same either way
    trainer.train(job(model={"factory": "tests.factories:probe"}, data=rgb, channels_last=True,
                      data_on_device=on_device, epochs=1))
    assert factories.PROBE and all(p["channels_last"] for p in factories.PROBE)
    trainer.train(job(model={"factory": "tests.factories:probe"}, data=rgb, channels_last=False, epochs=1))
    assert not any(p["channels_last"] for p in factories.PROBE)


def watch_epochs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What the built-in trainer's epochs ran with: one entry per training epoch, recorded inside it (while the
    trial's settings are in force): the batches object, the batches taken, the backend flags."""
    seen: list[dict[str, Any]] = []
    real = trainer.train_epoch

    def train_epoch(ctx: context.TrialContext, model: torch.nn.Module, batches: Any, *rest: Any) -> None:
        rec: dict[str, Any] = {"batches": batches, "taken": 0, "cudnn_benchmark": torch.backends.cudnn.benchmark,
                               "matmul": torch.get_float32_matmul_precision(), "threads": torch.get_num_threads(),
                               "cudnn_tf32": torch.backends.cudnn.allow_tf32}
        seen.append(rec)

        def counted() -> Any:
            for b in batches:
                rec["taken"] += 1
                yield b

        real(ctx, model, counted(), *rest)
        inner = getattr(batches, "_inner", None)
        rec["iterator"] = getattr(getattr(inner, "loader", None), "_iterator", None)

    monkeypatch.setattr(trainer, "train_epoch", train_epoch)
    return seen


@pytest.mark.parametrize("persistent", [True, False])
def test_dataloader_path_with_workers(persistent: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils.data import DataLoader

    epochs = watch_epochs(monkeypatch)
    r = trainer.train(job(data_on_device=False, num_workers=1, persistent_workers=persistent, prefetch_factor=3,
                          pin_memory=True))
    assert len(epochs) == 2 and r.epochs_run == 2
    inner = epochs[0]["batches"]._inner
    assert isinstance(inner, loaders.LoaderBatches) and type(inner.loader) is DataLoader  # not device batches
    loader = inner.loader
    assert all(e["batches"]._inner.loader is loader for e in epochs)  # one loader for the whole run
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (1, 3, persistent)
    assert loader.pin_memory is False  # pinned memory only helps a copy to a GPU: off on the CPU
    assert loader.batch_size == 128 and len(loader.dataset) == len(data.load(config.DataConfig()).y_train)
    assert [e["taken"] for e in epochs] == [len(loader)] * 2  # every training batch came through it
    # persistent workers: one worker iterator kept across the epochs; otherwise none is kept
    if persistent:
        assert epochs[0]["iterator"] is not None and epochs[1]["iterator"] is epochs[0]["iterator"]
        assert epochs[0]["iterator"]._num_workers == 1
    else:
        assert epochs[0]["iterator"] is None and epochs[1]["iterator"] is None
    assert "data_on_device" not in r.not_applied and "num_workers" not in r.not_applied
    assert r.val_accuracy > 0.5


def test_device_batches_without_a_dataloader(monkeypatch: pytest.MonkeyPatch) -> None:
    epochs = watch_epochs(monkeypatch)
    trainer.train(job(data_on_device=True, num_workers=2, epochs=1))
    assert isinstance(epochs[0]["batches"]._inner, loaders.DeviceBatches)  # batched by index: no DataLoader
    assert epochs[0]["taken"] == len(epochs[0]["batches"]) > 0


def test_backend_flags_applied_during_training_then_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    before = (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision(), torch.get_num_threads(),
              torch.backends.cudnn.allow_tf32)
    want_threads = 2 if before[2] == 1 else 1  # a thread count other than the current one
    epochs = watch_epochs(monkeypatch)
    trainer.train(job(cudnn_benchmark=not before[0], matmul_precision="medium", cpu_threads=want_threads, epochs=2))
    assert len(epochs) == 2
    for e in epochs:  # in force inside every training epoch
        assert (e["cudnn_benchmark"], e["matmul"], e["threads"], e["cudnn_tf32"]) == (
            not before[0], "medium", want_threads, True)
    after = (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision(), torch.get_num_threads(),
             torch.backends.cudnn.allow_tf32)
    assert after == before


def test_grad_accum_and_schedules(monkeypatch: pytest.MonkeyPatch) -> None:
    n_train = len(data.load(config.DataConfig()).y_train)
    batches = math.ceil(n_train / 128)  # per epoch; the last one short
    for sched, k in (("cosine", 2), ("onecycle", 3), ("constant", 1)):
        r, opt = train_seeing_the_optimizer(monkeypatch, job(optimizer="adam", lr_schedule=sched, grad_accum_steps=k,
                                                             epochs=2, lr=3e-3))
        # one optimizer step every k micro-batches, and one for an epoch's trailing partial accumulation
        assert {int(st["step"]) for st in opt.state.values()} == {2 * math.ceil(batches / k)}, sched
        assert (r.history[-1].lr < 3e-3) == (sched != "constant") and r.val_accuracy > 0.3


def test_label_smoothing_puts_a_floor_under_the_training_loss() -> None:
    """Cross-entropy against smoothed targets q is at least their entropy H(q): with smoothing 0.5 over 10 classes
    the training loss never drops below 1.68, where the unsmoothed one falls well under it."""
    eps, k = 0.5, 10
    q = [1 - eps + eps / k] + [eps / k] * (k - 1)
    floor = -sum(p * math.log(p) for p in q)
    smooth = trainer.train(job(label_smoothing=eps, epochs=3, lr=3e-3))
    plain = trainer.train(job(epochs=3, lr=3e-3))
    assert min(h.train_loss for h in smooth.history) >= floor - 1e-4
    assert plain.history[-1].train_loss < floor - 0.3
    assert smooth.val_accuracy > 0.8  # the evaluation's accuracy and loss are the plain ones


def test_data_fraction_trains_on_fewer_samples() -> None:
    full = trainer.train(job(epochs=1))
    half = trainer.train(job(epochs=1, data_fraction=0.5))
    ratio = half.history[0].samples_per_s * half.history[0].epoch_time_s / (
        full.history[0].samples_per_s * full.history[0].epoch_time_s)
    assert ratio == pytest.approx(0.5, abs=0.02)


def test_huge_lr_diverges() -> None:
    with pytest.raises(TrialStopped) as info:
        trainer.train(job(optimizer="sgd", lr=1e6, momentum=0.9, epochs=3, model={"name": "mlp", "hidden": 32}))
    assert info.value.reason == "diverged"


def first_stop(val_losses: list[float], patience: int, min_delta: float) -> int | None:
    """The epoch (1-based) early stopping should end at, from the README's rule: `patience` epochs in a row
    whose val_loss is not below the best so far by more than min_delta."""
    best, since = math.inf, 0
    for epoch, v in enumerate(val_losses, 1):
        if v < best - min_delta:
            best, since = v, 0
        else:
            since += 1
        if since >= patience:
            return epoch
    return None


def test_early_stopping_ends_when_val_loss_stalls() -> None:
    # lr so small that the weights hardly move: val_loss cannot improve by min_delta after the first epoch (only
    # batch-norm statistics change), so training ends at epoch 1 + patience, by construction
    r = trainer.train(job(epochs=30, lr=1e-9, optimizer="sgd", momentum=0.0, early_stopping_patience=2,
                          early_stopping_min_delta=1e-3))
    assert r.stopped_early_at == 3 and r.epochs_run == 3 and len(r.history) == 3
    losses = [h.val_loss for h in r.history]
    assert min(losses[1:]) > losses[0] - 1e-3  # why: val_loss stalled (no improvement by min_delta)
    assert first_stop(losses, 2, 1e-3) == 3


def test_early_stopping_waits_for_patience_while_learning() -> None:
    r = trainer.train(job(epochs=12, lr=3e-3, early_stopping_patience=1, early_stopping_min_delta=0.5))
    losses = [h.val_loss for h in r.history]
    want = first_stop(losses, 1, 0.5)
    assert want is not None and want < 12  # the val_loss gains shrink below 0.5 well before 12 epochs
    assert r.stopped_early_at == want and r.epochs_run == want == len(r.history)
    assert losses[want - 2] - losses[want - 1] <= 0.5  # why: the last epoch improved by no more than min_delta


def test_synthetic_and_npz(tmp_path) -> None:
    import numpy as np

    r = trainer.train(job(data={"name": "synthetic", "shape": [1, 8, 8], "n_samples": 400, "n_classes": 4},
                          epochs=3, lr=3e-3))
    assert r.val_accuracy > 0.4
    x, y = factories.blobs()
    np.savez(tmp_path / "b.npz", x=x, y=y)
    r = trainer.train(job(model={"name": "mlp", "hidden": 16}, data={"name": "npz", "path": str(tmp_path / "b.npz")},
                          epochs=3, lr=1e-2, batch_size=16))
    assert r.val_accuracy > 0.8


@pytest.mark.slow
def test_compile_wraps_the_model() -> None:
    r = trainer.train(job(model={"factory": "tests.factories:probe"}, compile=True, epochs=1))
    assert any(p["compiling"] for p in factories.PROBE)
    assert r.compile_time_s > 0 and r.train_time_s >= r.compile_time_s
