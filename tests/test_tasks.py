"""Loss and metrics per task, and the contract pieces put together as the training loop will use them:
uint8 batches on the device, `normalize`, `augment.apply`, `tasks.loss_fn`, `tasks.evaluate`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score
from torch import nn

from autotune import augment, config, data, models, space, tasks
from tests.test_data import write_cifar10, write_folder

CPU = torch.device("cpu")


def fit(cfg: config.RunConfig, settings: dict, epochs: int, seed: int = 0) -> tuple[nn.Module, data.Dataset, dict]:
    """The loop's use of the pieces, in its shortest form (the real loop adds clocks, precision, stop rules)."""
    torch.manual_seed(seed)
    ds = data.load(cfg.data, cfg.source, cfg.task)
    model = models.build_for(cfg.model, settings, ds.input_shape, ds.n_outputs, settings["dropout"],
                             settings["init"])
    batches = data.DeviceBatches(ds.x_train, ds.y_train, settings["batch_size"], CPU, False, seed)
    gen = augment.generator(CPU, seed)
    loss_fn = tasks.loss_fn(ds, settings["label_smoothing"])
    opt = torch.optim.Adam(model.parameters(), lr=settings["lr"])
    for _ in range(epochs):
        model.train()
        for xb, yb in batches:
            assert xb.dtype == ds.x_train.dtype  # uint8 images travel as uint8
            xb = augment.apply(ds.normalize(xb), settings, gen)
            loss = loss_fn(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return model, ds, tasks.evaluate(model, ds, ds.x_val, ds.y_val, 256, CPU)


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
    cfg = config.from_dict({"task": "regression", "data": {"name": "diabetes"}, "model": {"name": "mlp"},
                            "space": {"model.hidden": {"type": "categorical", "choices": [16]}}})
    settings = {**space.fixed_point(cfg, {}), "lr": 3e-3, "batch_size": 32}
    model, ds, metrics = fit(cfg, settings, epochs=10)
    assert metrics["val_r2"] > 0.25  # least squares reaches 0.33 on this split; predicting the mean, 0
    assert 1500 < metrics["val_mse"] < 5000  # original units: the target's variance is about 6000


def test_resnet_learns_a_png_folder_with_augmentation(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "imgs", n=10)
    cfg = config.from_dict({"data": {"name": "image_folder", "path": str(root), "cache_dir": str(tmp_path / "c"),
                                     "val_fraction": 0.3},
                            "model": {"name": "resnet", "depth": 8},
                            "space": {"model.width": {"type": "categorical", "choices": [8]}}})
    settings = {**space.fixed_point(cfg, {}), "lr": 3e-3, "batch_size": 8, "aug_crop_padding": 2, "aug_flip": True,
                "aug_cutout": 3}
    _, ds, metrics = fit(cfg, settings, epochs=6)
    assert ds.x_train.dtype == torch.uint8
    assert metrics["val_accuracy"] >= 0.8, metrics  # three colours: learnable in a few epochs


def test_resnet_trains_on_a_cifar_format_folder(tmp_path: Path) -> None:
    write_cifar10(tmp_path, per_batch=20)
    cfg = config.from_dict({"data": {"name": "cifar10", "path": str(tmp_path), "val_fraction": 0.5},
                            "model": {"name": "resnet", "depth": 8, "width": 4}})
    settings = {**space.fixed_point(cfg, {}), "lr": 1e-2, "batch_size": 25, "aug_flip": True}
    model, ds, metrics = fit(cfg, settings, epochs=2)
    assert ds.input_shape == (3, 32, 32) and set(metrics) == {"val_loss", "val_accuracy"}
    assert np.isfinite(metrics["val_loss"]) and all(torch.isfinite(p).all() for p in model.parameters())
