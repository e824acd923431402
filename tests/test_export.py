"""`best --export`: searched settings and searched model keys come back fixed, in a file that loads."""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml

from autotune import config, export, space
from autotune.results import TrialSummary


def test_model_keys_exported_as_fixed_model_keys(tmp_path: Path) -> None:
    cfg = config.from_dict({
        "model": {"name": "cnn", "hidden": 32},
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
                  "model.channels": {"type": "categorical", "choices": [[4, 8], [8, 16]]}},
        "train": {"epochs": 3},
    }, source=str(tmp_path / "s.yaml"))
    trial = optuna.create_study().ask()
    settings = space.sample(trial, cfg)
    best = TrialSummary(number=0, state="COMPLETE", params=trial.params, values={"val_accuracy": 0.9},
                        metrics={}, settings=settings)
    doc = export.best_yaml(cfg, best)
    assert doc["space"] == {} and doc["model"]["channels"] == settings["model.channels"]
    assert doc["model"]["hidden"] == 32 and doc["train"]["lr"] == settings["lr"] and doc["train"]["epochs"] == 3
    assert not any(k.startswith("model.") for k in doc["train"])
    path = export.export_best(cfg, best, tmp_path / "best.yaml")
    again = config.load(path)
    assert again.model.channels == tuple(settings["model.channels"]) and not again.space
    # a trial stored before settings were recorded: rebuilt from its params (JSON text of a list choice)
    doc = export.best_yaml(cfg, TrialSummary(number=0, state="COMPLETE", params=trial.params, values={}, metrics={}))
    assert doc["model"]["channels"] == settings["model.channels"]
    assert yaml.safe_load(yaml.safe_dump(doc)) == doc


def test_user_parameters_exported_fixed(tmp_path: Path) -> None:
    cfg = config.from_dict({"trainer": "tests.user_fits:fit", "train": {"epochs": 2},
                            "space": {"user.width": {"type": "categorical", "choices": [8, 64]}}},
                           source=str(tmp_path / "u.yaml"))
    trial = optuna.create_study().ask()
    settings = space.sample(trial, cfg)
    best = TrialSummary(number=0, state="COMPLETE", params=trial.params, values={"val_accuracy": 0.9},
                        metrics={}, settings=settings)
    path = export.export_best(cfg, best, tmp_path / "best.yaml")
    again = config.load(path)
    assert again.train["user.width"] == settings["user.width"] and not again.space
    assert again.trainer == "tests.user_fits:fit"
