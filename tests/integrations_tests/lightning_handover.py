"""Lightning programs that hand over what Lightning accepts: a DataModule with transfer hooks and a callback that
reads `trainer.datamodule`, one Callback object instead of a list, a LightningCLI program with `trainer_defaults`
(referenced as 'tests.integrations_tests.lightning_handover:NAME')."""

from __future__ import annotations

from collections import Counter
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from autotune.integrations import lightning as tune_lightning
from tests.integrations_tests.lightning_fits import Blobs
from tests.user_fits import X_VAL, Y_VAL, X, Y

SEEN: dict[str, Any] = {}


class CountingData(L.LightningDataModule):
    """Blobs in a DataModule that counts its hooks (where GPU augmentation usually lives)."""

    def __init__(self, batch_size: int = 50) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.calls: Counter[str] = Counter()

    def setup(self, stage: str) -> None:
        self.calls["setup"] += 1
        self.blobs_train, self.blobs_val = TensorDataset(X, Y), TensorDataset(X_VAL, Y_VAL)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.blobs_train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.blobs_val, batch_size=100)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.calls["on_before_batch_transfer"] += 1
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        self.calls["transfer_batch_to_device"] += 1
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.calls["on_after_batch_transfer"] += 1
        return batch


class ReadsDataModule(L.Callback):
    """As Lightning's autoencoder example's ImageSampler: reads the validation set through trainer.datamodule."""

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        SEEN.setdefault("val_sizes", []).append(len(trainer.datamodule.blobs_val))
        SEEN["train_batch_size"] = trainer.train_dataloader.batch_size


def plain(epochs: int = 2) -> CountingData:
    """The program with Lightning alone: its DataModule, after training."""
    data = CountingData()
    trainer = L.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1, callbacks=[ReadsDataModule()])
    trainer.fit(Blobs(), datamodule=data)
    return data


def fit_datamodule(ctx: tune_lightning.TrialContext) -> None:
    SEEN.clear()
    SEEN["data"] = data = CountingData()
    tune_lightning.fit(ctx, Blobs(), data, callbacks=[ReadsDataModule()])


def fit_one_callback(ctx: tune_lightning.TrialContext) -> None:
    SEEN.clear()
    tune_lightning.fit(ctx, Blobs(), CountingData(), callbacks=ReadsDataModule())  # (Lightning takes one or a list)


class CountingBlobs(Blobs):
    """Blobs whose weights the seed decides (a LightningCLI program's model: built by the CLI)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__(width)
        SEEN["first_weight"] = float(self.net[0].weight[0, 0])


CLI_DEFAULTS = {"seed_everything_default": 1234,
                "trainer_defaults": {"max_epochs": 3, "callbacks": ReadsDataModule(), "limit_val_batches": 1}}


def fit_cli(ctx: tune_lightning.TrialContext) -> None:
    """Lightning's autoencoder example's shape: LightningCLI(Model, DataModule, seed_everything_default=1234,
    trainer_defaults={"callbacks": ImageSampler(), "max_epochs": 10}) -- here through autotune."""
    SEEN.clear()
    tune_lightning.cli(ctx, CountingBlobs, CountingData, **CLI_DEFAULTS)


def plain_cli() -> None:
    """The same program with Lightning alone (run=False, as the example)."""
    from lightning.pytorch.cli import LightningCLI

    SEEN.clear()
    made = LightningCLI(CountingBlobs, CountingData, run=False, args=["--trainer.logger=false",
                                                                       "--trainer.enable_progress_bar=false",
                                                                       "--trainer.enable_checkpointing=false"],
                        save_config_callback=None, **CLI_DEFAULTS)
    made.trainer.fit(made.model, datamodule=made.datamodule)


def fit_cli_bad_argument(ctx: tune_lightning.TrialContext) -> None:
    tune_lightning.cli(ctx, CountingBlobs, CountingData, args=["--trainer.max_epochs=three"], **CLI_DEFAULTS)
