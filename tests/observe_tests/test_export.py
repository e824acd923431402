"""`best --export`: searched settings and searched model keys come back fixed, in a file that loads."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import torch
import yaml

import autotune
from autotune import config
from autotune.observe import export
from autotune.search import results, space
from autotune.search.results import TrialSummary


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


def _threads_trial(tmp_path: Path, cap: int | None, **train: object) -> optuna.trial.FrozenTrial:
    """One digits trial on 2 torch threads, after an oversubscribed trial left this process's cap at `cap`."""
    from autotune.study import objective as objective_mod
    from autotune.study import runner as study_mod

    cfg = _two_trials(tmp_path, builtin=True)
    cfg = config.from_dict({**cfg.to_dict(), "train": {**cfg.to_dict()["train"], **train}}, source=cfg.source)
    obj = objective_mod.Objective(cfg)
    obj.cpu_cap = cap  # what `_oversubscribed` leaves after a trial whose threads waited for busy cores
    study = study_mod.open_study(cfg)
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        study.optimize(obj, n_trials=1)
    finally:
        torch.set_num_threads(old)
    return study.trials[0]


def test_a_capped_trials_threads_are_recorded_shown_and_exported(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A trial capped at 1 thread after an oversubscribed one: its device says 1 thread, `best` shows the cap, and
    the export trains on 1 thread (without it the export ran on torch's default, 8-18 s instead of 1.2 s)."""
    from autotune.observe import TuneResult, progress
    from autotune.study import open_study

    trial = _threads_trial(tmp_path, cap=1)
    assert trial.state.name == "COMPLETE" and trial.user_attrs["cpu_threads_capped"] == 1
    assert trial.user_attrs["device"].endswith(", 1 threads)"), trial.user_attrs["device"]  # not the process's 2
    cfg = _two_trials(tmp_path, builtin=True)
    result = TuneResult(study=open_study(cfg, create=False), config=cfg)
    progress.print_best(result)
    assert "  cpu_threads: 1 (trained on 1 torch thread(s): capped: the cores were busy)" in \
        capsys.readouterr().out
    again = config.load(export.export_best(cfg, result.best, tmp_path / "best.yaml"))
    assert again.train["cpu_threads"] == 1 and again.study.trial_seed == trial.user_attrs["seed"]
    assert autotune.run(again).study.trials[0].user_attrs["device"].endswith(", 1 threads)")  # trains as it did


def test_threads_left_to_loader_workers_are_exported(tmp_path: Path) -> None:
    """cpu_threads 0 with a DataLoader worker: the trial trains on one thread less than the process's, and says so."""
    trial = _threads_trial(tmp_path, cap=None, data_on_device=False, num_workers=1)
    assert trial.user_attrs["cpu_threads_used"] == 1 and trial.user_attrs["device"].endswith(", 1 threads)")
    best = results.summarize(trial, ["val_accuracy"])
    assert export.best_yaml(_two_trials(tmp_path, builtin=True), best)["train"]["cpu_threads"] == 1
