"""Lightning programs as users write them, on Gaussian blobs, for the integration's tests
(referenced as 'tests.integrations_tests.lightning_fits:NAME')."""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from autotune.integrations import lightning as tune_lightning
from tests.user_fits import X_VAL, Y_VAL, X, Y

SEEN: dict[str, Any] = {}  # what the last trial's Trainer held, for the mapping tests


class Blobs(L.LightningModule):
    def __init__(self, width: int = 16, conv: bool = False, val_sleep_s: float = 0.0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 1) if conv else None  # (a 2-D convolution: channels_last has a layer to act on)
        self.net = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 3))
        self.val_sleep_s = val_sleep_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.conv is not None:
            x = self.conv(x.view(-1, 1, 2, 4)).flatten(1)
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_accuracy", (logits.argmax(1) == y).float().mean())

    def on_validation_epoch_end(self) -> None:
        time.sleep(self.val_sleep_s)  # a slow evaluation: not training time

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.5)


def loaders() -> tuple[DataLoader, DataLoader]:
    return DataLoader(TensorDataset(X, Y), batch_size=50, shuffle=True), DataLoader(TensorDataset(X_VAL, Y_VAL))


class Capture(L.Callback):
    """Notes what the Trainer, its loaders and its optimizer held once training started, and what stepped."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        opt = trainer.optimizers[0]
        SEEN.update(trainer=trainer, train_loader=trainer.train_dataloader, val_loader=trainer.val_dataloaders,
                    optimizer=opt, schedulers=list(trainer.lr_scheduler_configs), model=pl_module,
                    compiled=trainer.strategy.model is not pl_module or hasattr(pl_module, "_compiler_ctx"),
                    steps=0, lrs=[], benchmark=torch.backends.cudnn.benchmark,
                    biases_zero=all(not bool(m.bias.any()) for m in pl_module.modules() if isinstance(m, nn.Linear)))
        opt.register_step_post_hook(lambda o, *_: (SEEN.__setitem__("steps", SEEN["steps"] + 1),
                                                   SEEN["lrs"].append(o.param_groups[0]["lr"])))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        SEEN["samples"] = SEEN.get("samples", 0) + len(batch[0])


def fit(ctx: tune_lightning.TrialContext) -> None:
    train, val = loaders()
    SEEN.clear()
    tune_lightning.fit(ctx, Blobs(ctx.params["width"] if "width" in ctx.params else 16,
                                  conv=ctx.params["conv"] if "conv" in ctx.params else False,
                                  val_sleep_s=ctx.params["val_sleep_s"] if "val_sleep_s" in ctx.params else 0.0),
                       train_dataloaders=train, val_dataloaders=val, callbacks=[Capture()])


def fit_validating_twice_an_epoch(ctx: tune_lightning.TrialContext) -> None:
    train, val = loaders()
    SEEN.clear()
    tune_lightning.fit(ctx, Blobs(), train_dataloaders=train, val_dataloaders=val, val_check_interval=0.5,
                       callbacks=[Capture()])


def fit_half_the_batches(ctx: tune_lightning.TrialContext) -> None:
    train, val = loaders()
    SEEN.clear()
    tune_lightning.fit(ctx, Blobs(), train_dataloaders=train, val_dataloaders=val, limit_train_batches=0.5,
                       callbacks=[Capture()])


def fit_own_optimizer(ctx: tune_lightning.TrialContext) -> None:
    train, val = loaders()
    SEEN.clear()
    tune_lightning.fit(ctx, Blobs(), train_dataloaders=train, val_dataloaders=val, own_optimizer=True,
                       callbacks=[Capture()])


def fit_with_precision_argument(ctx: tune_lightning.TrialContext) -> None:
    train, val = loaders()
    SEEN.clear()
    tune_lightning.fit(ctx, Blobs(), train_dataloaders=train, val_dataloaders=val, precision="bf16-mixed",
                       callbacks=[Capture()])


def fit_with_accelerator_argument(ctx: tune_lightning.TrialContext) -> None:
    train, val = loaders()
    tune_lightning.fit(ctx, Blobs(), train_dataloaders=train, val_dataloaders=val, accelerator="cpu")


def fit_three_epochs(ctx: tune_lightning.TrialContext) -> None:
    """The user's own recipe: the module's SGD, the loaders as they are, 3 epochs given to fit."""
    train, val = loaders()
    SEEN.clear()
    tune_lightning.fit(ctx, Blobs(), train_dataloaders=train, val_dataloaders=val, max_epochs=3,
                       callbacks=[Capture()])


# A module built once, at import: every trial of a study would train it further (refused at the second trial).
SHARED = Blobs()


def fit_shared_module(ctx: tune_lightning.TrialContext) -> None:
    train, val = loaders()
    tune_lightning.fit(ctx, SHARED, train_dataloaders=train, val_dataloaders=val)


class LogsValid(Blobs):
    """Logs its validation loss as `valid_loss`, on each step too (Lightning's own example does)."""

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("valid_loss", F.cross_entropy(self(x), y), on_step=True)


def fit_logs_valid_loss(ctx: tune_lightning.TrialContext) -> None:
    train, val = loaders()
    tune_lightning.fit(ctx, LogsValid(), train_dataloaders=train, val_dataloaders=val)


class LogsTrainAccuracy(Blobs):
    """Logs its training accuracy: per epoch (`on_epoch=True`), or as the training_step's default (per step only)."""

    def __init__(self, per_epoch: bool) -> None:
        super().__init__()
        self.per_epoch = per_epoch

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        acc = (logits.argmax(1) == y).float().mean()
        self.log("train_acc", acc, on_step=not self.per_epoch, on_epoch=self.per_epoch)
        return F.cross_entropy(logits, y)


class EpochValues(L.Callback):
    """What Lightning holds for train_acc at each training epoch's end (the epoch's own value)."""

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        SEEN.setdefault("train_acc", []).append(float(trainer.callback_metrics["train_acc"]))


def fit_logs_train_acc_per_epoch(ctx: tune_lightning.TrialContext) -> None:
    train, val = loaders()
    SEEN.clear()
    tune_lightning.fit(ctx, LogsTrainAccuracy(per_epoch=True), train_dataloaders=train, val_dataloaders=val,
                       callbacks=[EpochValues()])


def fit_logs_train_acc_per_step(ctx: tune_lightning.TrialContext) -> None:
    train, val = loaders()
    tune_lightning.fit(ctx, LogsTrainAccuracy(per_epoch=False), train_dataloaders=train, val_dataloaders=val)
