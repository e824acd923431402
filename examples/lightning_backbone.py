"""Lightning's basic example of a backbone image classifier (examples/pytorch/basics/backbone_image_classifier.py in
Lightning-AI/pytorch-lightning), rewritten for this repository on scikit-learn's bundled 8x8 digits (no download):
a two-layer backbone inside a LightningModule that logs `train_loss` and `valid_loss` (on each step too, as the
original does) and, added here, `valid_acc`; a LightningDataModule that splits a validation set off the training
images with a seeded `random_split` and serves them without shuffling, as the original does; Adam at 1e-4.

    python examples/lightning_backbone.py --max_epochs 20   # the program as it is (argparse for LightningCLI)
    autotune run examples/lightning_backbone.yaml           # tuned: the 3 lines marked `# autotune`

The original reads its arguments with LightningCLI (jsonargparse); here a few argparse flags stand in for it.
"""

from __future__ import annotations

import argparse

import lightning as L
import torch
from digits_data import digits
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

from autotune.integrations import lightning as tune_lightning  # autotune

MAX_EPOCHS = 20


class Backbone(torch.nn.Module):
    def __init__(self, hidden_dim: int = 128) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(8 * 8, hidden_dim)
        self.l2 = torch.nn.Linear(hidden_dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(x.size(0), -1)
        x = torch.relu(self.l1(x))
        return torch.relu(self.l2(x))  # (as the original: its logits pass a ReLU too)


class LitClassifier(L.LightningModule):
    def __init__(self, backbone: Backbone | None = None, learning_rate: float = 0.0001) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = backbone if backbone is not None else Backbone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("valid_loss", F.cross_entropy(logits, y), on_step=True)
        self.log("valid_acc", (logits.argmax(1) == y).float().mean())

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("test_loss", F.cross_entropy(logits, y))
        self.log("test_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


class MyDataModule(L.LightningDataModule):
    def __init__(self, batch_size: int = 32) -> None:
        super().__init__()
        x, y, x_test, y_test = digits()
        self.digits_test = TensorDataset(x_test, y_test)
        n_val = len(y) // 10
        self.digits_train, self.digits_val = random_split(TensorDataset(x, y), [len(y) - n_val, n_val],
                                                          generator=torch.Generator().manual_seed(42))
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.digits_train, batch_size=self.batch_size)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.digits_val, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.digits_test, batch_size=self.batch_size)


def fit(ctx: tune_lightning.TrialContext) -> None:  # autotune: `trainer: lightning_backbone:fit` in the YAML
    tune_lightning.fit(ctx, LitClassifier(Backbone()), MyDataModule(), max_epochs=MAX_EPOCHS)  # autotune


def cli_main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max_epochs", type=int, default=MAX_EPOCHS)
    parser.add_argument("--learning_rate", type=float, default=0.0001)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    L.seed_everything(args.seed)
    model = LitClassifier(Backbone(), learning_rate=args.learning_rate)
    data = MyDataModule(batch_size=args.batch_size)
    trainer = L.Trainer(max_epochs=args.max_epochs, logger=False, enable_progress_bar=False)
    trainer.fit(model, datamodule=data)
    return trainer.test(ckpt_path="best", datamodule=data)[0]


if __name__ == "__main__":
    print(cli_main())
