"""Loss and metrics per task, and the contract pieces put together as the training loop will use them:
uint8 batches on the device, `normalize`, `augment.apply`, `tasks.loss_fn`, `tasks.evaluate`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score
from torch import nn

import autotune
from autotune import config
from autotune.study.runner import open_study
from autotune.training import models, tasks
from autotune.training.data import augment
from autotune.training.data import registry as data
from tests.support import write_cifar10, write_folder

CPU = torch.device("cpu")


def test_regression_metrics_match_scikit_learn_in_original_units() -> None:
    cfg = config.from_dict({"task": "regression", "data": {"name": "diabetes"}, "model": {"name": "mlp"}})
    ds = data.load(cfg.data, cfg.source, "regression")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 1))
    got = tasks.evaluate(model, ds, ds.x_val, ds.y_val, 16, CPU)  # batches of 16: sums across batches
    with torch.no_grad():
        pred = ds.targets_in_units(model(ds.x_val)).numpy()[:, 0]
    true = ds.targets_in_units(ds.y_val).numpy()[:, 0]
    assert got["val_mse"] == pytest.approx(mean_squared_error(true, pred), rel=1e-4)
    assert got["val_mae"] == pytest.approx(mean_absolute_error(true, pred), rel=1e-4)
    assert got["val_r2"] == pytest.approx(r2_score(true, pred), rel=1e-4, abs=1e-5)
    with torch.no_grad():
        assert got["val_loss"] == pytest.approx(float(nn.functional.mse_loss(model(ds.x_val), ds.y_val)), rel=1e-4)
    assert tasks.chance_loss(ds) == 1.0 and isinstance(tasks.loss_fn(ds), nn.MSELoss)


def test_classification_metrics_over_batches() -> None:
    ds = data.load(config.DataConfig())
    torch.manual_seed(0)
    model = models.build(config.ModelConfig(name="mlp", hidden=16), ds.input_shape, 10, 0.0, "default").eval()
    ours = tasks.evaluate(model, ds, ds.x_val, ds.y_val, 100, CPU)  # 360 samples: batches of 100, 100, 100, 60
    with torch.no_grad():
        logits = model(ds.x_val)
    assert ours["val_loss"] == pytest.approx(float(nn.functional.cross_entropy(logits, ds.y_val)), rel=1e-5)
    assert ours["val_accuracy"] == pytest.approx(float((logits.argmax(1) == ds.y_val).float().mean()))
    assert tasks.chance_loss(ds) == pytest.approx(np.log(10)) and isinstance(tasks.loss_fn(ds), nn.CrossEntropyLoss)


def test_regression_learns_diabetes() -> None:
    cfg = config.from_dict({"task": "regression", "data": {"name": "diabetes"}, "model": {"name": "mlp", "hidden": 16},
                            "train": {"epochs": 10, "lr": 3e-3, "batch_size": 32}})
    r = autotune.train(cfg)  # the real loop: MSE on standardized targets, metrics in original units
    assert set(r.history[-1].metrics) == {"val_loss", "val_mse", "val_mae", "val_r2"}
    assert r.final["val_r2"] > 0.25  # least squares reaches 0.33 on this split; predicting the mean, 0
    assert 1500 < r.final["val_mse"] < 5000  # original units: the target's variance is about 6000
    assert r.history[-1].train_loss < r.history[0].train_loss


def test_resnet_learns_a_png_folder_with_augmentation(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "imgs", n=10)
    cfg = config.from_dict({"data": {"name": "image_folder", "path": str(root), "cache_dir": str(tmp_path / "c"),
                                     "val_fraction": 0.3},
                            "model": {"name": "resnet", "depth": 8, "width": 8},
                            "train": {"epochs": 6, "lr": 3e-3, "batch_size": 8, "aug_crop_padding": 2,
                                      "aug_flip": True, "aug_cutout": 3, "channels_last": True}})
    seen = []
    real_apply = augment.apply

    def spy(xb: torch.Tensor, settings: dict, gen: torch.Generator) -> torch.Tensor:
        seen.append(xb.dtype)  # normalized (float) by the time it is augmented; stored uint8
        return real_apply(xb, settings, gen)

    augment.apply = spy  # type: ignore[assignment]
    try:
        r = autotune.train(cfg)
    finally:
        augment.apply = real_apply  # type: ignore[assignment]
    assert seen and set(seen) == {torch.float32}
    assert data.load(cfg.data, cfg.source).x_train.dtype == torch.uint8
    assert r.val_accuracy >= 0.8, r.final  # three colours: learnable in a few epochs


def test_resnet_trains_on_a_cifar_format_folder(tmp_path: Path) -> None:
    write_cifar10(tmp_path, per_batch=20)
    cfg = config.from_dict({"data": {"name": "cifar10", "path": str(tmp_path), "val_fraction": 0.5},
                            "model": {"name": "resnet", "depth": 8, "width": 4},
                            "train": {"epochs": 2, "lr": 1e-2, "batch_size": 25, "aug_flip": True}})
    r = autotune.train(cfg)
    assert set(r.history[-1].metrics) == {"val_loss", "val_accuracy"} and r.epochs_run == 2
    assert np.isfinite(r.val_loss) and all(torch.isfinite(p).all() for p in r.model.parameters())


def test_searched_width_changes_the_model_and_its_speed(tmp_path: Path) -> None:
    cfg = config.from_dict({"study": {"name": "w", "storage": f"sqlite:///{tmp_path}/w.db", "n_trials": 2},
                            "data": {"name": "synthetic", "shape": [3, 8, 8], "n_samples": 512},
                            "model": {"name": "resnet", "depth": 8},
                            "train": {"epochs": 2, "batch_size": 64},
                            "space": {"model.width": {"type": "categorical", "choices": [4, 32]}},
                            "pruning": {"pruner": "none"}}, source=str(tmp_path / "w.yaml"))
    study = open_study(cfg)
    study.enqueue_trial({"model.width": 4})
    study.enqueue_trial({"model.width": 32})
    small, big = autotune.run(cfg).study.trials
    assert small.params["model.width"] == 4 and big.params["model.width"] == 32
    assert big.user_attrs["model_params"] > 20 * small.user_attrs["model_params"]  # width^2: 64x the conv weights
    assert big.user_attrs["samples_per_s"] < small.user_attrs["samples_per_s"]
