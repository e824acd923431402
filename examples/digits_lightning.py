"""A Lightning program as people write it (a LightningModule and a LightningDataModule on scikit-learn's bundled
digits), tuned by autotune with the lines marked `# autotune` (examples/digits_lightning.yaml):

    autotune run examples/digits_lightning.yaml

Run as a script, it trains once with Lightning alone (`python examples/digits_lightning.py`).
autotune maps the trial's precision, accumulation, clipping, epochs, batch size and DataLoader settings onto
Lightning's own arguments, builds the searched optimizer, and times each epoch's training without its validation.
"""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from digits_data import digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from autotune.integrations import lightning as tune_lightning  # autotune


class DigitsNet(L.LightningModule):
    def __init__(self, width: int = 16, lr: float = 1e-3) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Conv2d(1, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                 nn.Linear(width * 16, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_accuracy", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class Digits(L.LightningDataModule):
    def __init__(self, batch_size: int = 64) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        x, y, x_val, y_val = digits()
        self.train_set, self.val_set = TensorDataset(x, y), TensorDataset(x_val, y_val)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)


def fit(ctx: tune_lightning.TrialContext) -> None:  # autotune
    tune_lightning.fit(ctx, DigitsNet(width=ctx.params["width"]), Digits())  # autotune


if __name__ == "__main__":
    L.Trainer(max_epochs=5, logger=False, enable_checkpointing=False).fit(DigitsNet(), Digits())
