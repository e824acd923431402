"""Sampling: every parameter type, conditionals, grid, and fixed points."""

from __future__ import annotations

import optuna

from autotune import config, space


def cfg_with(space_raw: dict, **extra) -> config.RunConfig:
    return config.from_dict({"space": space_raw, **extra})


def test_conditional_momentum_only_for_sgd() -> None:
    cfg = cfg_with({
        "optimizer": {"type": "categorical", "choices": ["sgd", "adam"]},
        "momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}},
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    })
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        s = space.sample(trial, cfg)
        seen.add(s["optimizer"])
        assert ("momentum" in trial.params) == (s["optimizer"] == "sgd")
        assert 1e-4 <= s["lr"] <= 1e-1
        study.tell(trial, 0.0)
    assert seen == {"sgd", "adam"}


def test_condition_order_independent_of_yaml_order() -> None:
    cfg = cfg_with({
        "momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": ["sgd", "sgd_nesterov"]}},
        "optimizer": {"type": "categorical", "choices": ["sgd", "sgd_nesterov", "adam"]},
    })
    assert space.order(cfg.space) == ["optimizer", "momentum"]


def test_types_int_step_bool_categorical() -> None:
    cfg = cfg_with({
        "epochs": {"type": "int", "low": 2, "high": 8, "step": 2},
        "channels_last": {"type": "bool"},
        "batch_size": {"type": "categorical", "choices": [32, 64]},
        "dropout": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.1},
    })
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        s = space.sample(study.ask(), cfg)
        assert s["epochs"] in (2, 4, 6, 8) and isinstance(s["epochs"], int)
        assert isinstance(s["channels_last"], bool)
        assert s["batch_size"] in (32, 64) and type(s["batch_size"]) is int
        assert abs(s["dropout"] * 10 - round(s["dropout"] * 10)) < 1e-9


def test_grid_space() -> None:
    cfg = cfg_with({
        "batch_size": {"type": "categorical", "choices": [32, 64]},
        "epochs": {"type": "int", "low": 2, "high": 6, "step": 2},
        "channels_last": {"type": "bool"},
    }, study={"sampler": "grid"})
    g = space.grid(cfg)
    assert g == {"batch_size": [32, 64], "epochs": [2, 4, 6], "channels_last": [False, True]}


def test_fixed_settings_pass_through() -> None:
    cfg = cfg_with({"lr": {"type": "float", "low": 1e-3, "high": 1e-2}}, train={"epochs": 3, "precision": "bf16"})
    s = space.sample(optuna.create_study().ask(), cfg)
    assert s["epochs"] == 3 and s["precision"] == "bf16" and s["optimizer"] == "adam"
