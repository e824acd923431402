"""The `LitMNIST` program of Lightning's "Introduction to PyTorch Lightning" tutorial (mnist-hello-world in
Lightning-AI/tutorials), rewritten for this repository on scikit-learn's bundled 8x8 digits (no download). As the
tutorial, the LightningModule carries its own data hooks (prepare_data, setup with an unseeded `random_split`,
train/val/test_dataloader; no DataModule, `trainer.fit(model)`), a 3-layer MLP with dropout and log-softmax outputs
trained with `nll_loss`, torchmetrics' `Accuracy` logged as `val_acc`, Adam at 2e-4, batches of 64 on a CPU (256 on
a GPU), 3 epochs and a CSVLogger.

    python examples/lightning_litmnist.py      # the program as it is (Lightning alone)
    autotune run examples/lightning_litmnist.yaml   # tuned: the 3 lines marked `# autotune`

Changed for the data (not for autotune): MNIST's 28x28 images and their Normalize constants become the digits' 8x8
ones (`self.dims`, the mean/std), its download becomes the bundled arrays, its 55000/5000 split the same 11:1 share.
"""

from __future__ import annotations

import os

import lightning as L
import torch
from digits_data import digits
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split
from torchmetrics import Accuracy

from autotune.integrations import lightning as tune_lightning  # autotune

PATH_DATASETS = os.environ.get("PATH_DATASETS", ".")
BATCH_SIZE = 256 if torch.cuda.is_available() else 64
MAX_EPOCHS = 3
MEAN, STD = 0.3049, 0.3758  # the digits' training images (MNIST's: 0.1307, 0.3081)


class LitMNIST(L.LightningModule):
    def __init__(self, data_dir: str = PATH_DATASETS, hidden_size: int = 64, learning_rate: float = 2e-4) -> None:
        super().__init__()
        # the arguments, kept as attributes
        self.data_dir = data_dir
        self.hidden_size = hidden_size
        self.learning_rate = learning_rate

        # what the dataset fixes
        self.num_classes = 10
        self.dims = (1, 8, 8)
        channels, width, height = self.dims

        # the network
        self.model = nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * width * height, hidden_size),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden_size, self.num_classes),
        )
        self.val_accuracy = Accuracy(task="multiclass", num_classes=10)
        self.test_accuracy = Accuracy(task="multiclass", num_classes=10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.model(x), dim=1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.nll_loss(self(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.val_accuracy.update(torch.argmax(logits, dim=1), y)
        self.log("val_loss", F.nll_loss(logits, y), prog_bar=True)
        self.log("val_acc", self.val_accuracy, prog_bar=True)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.test_accuracy.update(torch.argmax(logits, dim=1), y)
        self.log("test_loss", F.nll_loss(logits, y), prog_bar=True)
        self.log("test_acc", self.test_accuracy, prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)

    # the data hooks, on the module itself

    def prepare_data(self) -> None:
        digits()  # (the tutorial downloads MNIST here: the digits are bundled)

    def setup(self, stage: str | None = None) -> None:
        x, y, x_test, y_test = digits()
        if stage == "fit" or stage is None:
            full = TensorDataset((x - MEAN) / STD, y)
            n_val = len(full) // 12  # (MNIST's 55000 / 5000)
            self.mnist_train, self.mnist_val = random_split(full, [len(full) - n_val, n_val])
        if stage == "test" or stage is None:
            self.mnist_test = TensorDataset((x_test - MEAN) / STD, y_test)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_train, batch_size=BATCH_SIZE)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_val, batch_size=BATCH_SIZE)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_test, batch_size=BATCH_SIZE)


def fit(ctx: tune_lightning.TrialContext) -> None:  # autotune: `trainer: lightning_litmnist:fit` in the YAML
    tune_lightning.fit(ctx, LitMNIST(hidden_size=ctx.params.get("hidden_size", 64)), max_epochs=MAX_EPOCHS)  # autotune


def main() -> L.Trainer:
    model = LitMNIST()
    trainer = L.Trainer(accelerator="auto", devices=1, max_epochs=MAX_EPOCHS, logger=CSVLogger(save_dir="logs/"))
    trainer.fit(model)
    return trainer


if __name__ == "__main__":
    trainer = main()
    trainer.test()
