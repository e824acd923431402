"""`best --export`: searched settings and searched model keys come back fixed, in a file that loads."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

import autotune
from autotune import config
from autotune.observe import _export as export
from autotune.search import _results as results
from autotune.search import _space as space
from autotune.search._results import TrialSummary


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


def _two_trials(tmp_path: Path, builtin: bool) -> config.RunConfig:
    raw: dict = {"study": {"name": "e", "storage": f"sqlite:///{tmp_path}/e.db", "n_trials": 2, "seed": 3,
                           "sampler": "random"},
                 "pruning": {"pruner": "none"}, "space": {"lr": {"type": "float", "low": 1e-3, "high": 3e-2,
                                                                  "log": True}}}
    if builtin:
        raw.update(data={"name": "digits"}, model={"name": "cnn", "channels": [4, 8], "hidden": 16},
                   train={"epochs": 1, "device": "cpu", "batch_size": 128})
    else:
        raw.update(trainer="tests.user_fits:fit", train={"epochs": 2, "batch_size": 64})
        raw["space"]["user.width"] = {"type": "categorical", "choices": [8, 16]}
    return config.from_dict(raw, source=str(tmp_path / "e.yaml"))


@pytest.mark.parametrize("builtin", [True, False], ids=["builtin", "user"])
def test_the_exported_trial_trains_again_with_its_seed_to_the_same_values(tmp_path: Path, builtin: bool) -> None:
    cfg = _two_trials(tmp_path, builtin)
    trial = autotune.run(cfg).study.trials[1]  # not trial 0: its seed is study.seed x 100003 + 1
    assert trial.state.name == "COMPLETE" and trial.user_attrs["seed"] == 3 * 100_003 + 1
    best = results.summarize(trial, [o.metric for o in cfg.objectives])
    again = config.load(export.export_best(cfg, best, tmp_path / "best.yaml"))
    assert again.study.trial_seed == trial.user_attrs["seed"] and not again.space
    r = autotune.train(again)
    assert r.val_loss == pytest.approx(trial.user_attrs["val_loss"], rel=1e-6, abs=1e-9)
    assert r.val_accuracy == pytest.approx(trial.user_attrs["val_accuracy"], abs=1e-9)
    one = autotune.run(again).study.trials[0]  # `autotune run best.yaml`: its one trial trains with that seed
    assert one.user_attrs["seed"] == trial.user_attrs["seed"]
    assert one.user_attrs["val_loss"] == pytest.approx(trial.user_attrs["val_loss"], rel=1e-6, abs=1e-9)


def test_a_user_trainer_export_has_no_data_or_model_section_unless_the_file_had_one(tmp_path: Path) -> None:
    cfg = _two_trials(tmp_path, builtin=False)
    best = TrialSummary(number=0, state="COMPLETE", params={"lr": 0.01}, values={}, metrics={},
                                settings={**cfg.fixed(), "lr": 0.01, "user.width": 8})
    doc = export.best_yaml(cfg, best)
    assert "data" not in doc and "model" not in doc and doc["study"]["trial_seed"] is None  # (no seed stored)
    assert config.from_dict(doc).train["user.width"] == 8
    with_model = config.from_dict({"trainer": "tests.user_fits:fit", "model": {"name": "mlp"}}, source=cfg.source)
    assert export.best_yaml(with_model, best)["model"]["name"] == "mlp" and "data" not in \
        export.best_yaml(with_model, best)
