"""Sampling: every parameter type, conditionals, grid, and fixed points."""

from __future__ import annotations

import optuna

from autotune import config
from autotune.search import space


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


def test_model_keys_sampled_with_the_settings() -> None:
    cfg = cfg_with({
        "model.width": {"type": "categorical", "choices": [8, 16, 32]},
        "model.depth": {"type": "categorical", "choices": [8, 14]},
        "lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
    }, model={"name": "resnet"})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    widths = set()
    for _ in range(15):
        trial = study.ask()
        s = space.sample(trial, cfg)
        assert s["model.width"] in (8, 16, 32) and s["model.depth"] in (8, 14) and "lr" in s
        assert trial.params["model.width"] == s["model.width"]
        widths.add(s["model.width"])
        study.tell(trial, 0.0)
    assert widths == {8, 16, 32}


def test_list_choices_reach_optuna_as_text_and_come_back_as_lists() -> None:
    cfg = cfg_with({"model.channels": {"type": "categorical", "choices": [[8, 16], [16, 32, 64]]},
                    "batch_size": {"type": "categorical", "choices": [32, 64]}}, study={"sampler": "grid"})
    study = optuna.create_study(sampler=optuna.samplers.GridSampler(space.grid(cfg), seed=0))
    seen = []

    def objective(trial: optuna.Trial) -> float:
        s = space.sample(trial, cfg)
        assert isinstance(trial.params["model.channels"], str)  # JSON text in storage
        seen.append((tuple(s["model.channels"]), s["batch_size"]))
        return 0.0

    study.optimize(objective, n_trials=4)
    assert sorted(seen) == [((8, 16), 32), ((8, 16), 64), ((16, 32, 64), 32), ((16, 32, 64), 64)]
    assert space.grid(cfg)["model.channels"] == ["[8, 16]", "[16, 32, 64]"]
    p = space.fixed_point(cfg, {"model.channels": "[16, 32, 64]"})
    assert p["model.channels"] == [16, 32, 64] and p["batch_size"] == 32
    assert space.fixed_point(cfg, {})["model.channels"] == [8, 16]


def test_inactive_model_key_keeps_the_model_section() -> None:
    cfg = cfg_with({
        "optimizer": {"type": "categorical", "choices": ["sgd", "adam"]},
        "momentum": {"type": "float", "low": 0.0, "high": 0.9, "when": {"optimizer": "sgd"}},
        "model.hidden": {"type": "categorical", "choices": [8, 256], "when": {"optimizer": "sgd"}},
    }, model={"name": "mlp"})
    p = space.fixed_point(cfg, {"optimizer": "adam"})
    assert "model.hidden" not in p and p["momentum"] == 0.9  # an inactive setting keeps its default
    assert space.fixed_point(cfg, {"optimizer": "sgd"})["model.hidden"] == 8


def test_a_condition_on_a_model_key() -> None:
    cfg = cfg_with({
        "model.depth": {"type": "categorical", "choices": [8, 20]},
        "weight_decay": {"type": "float", "low": 1e-5, "high": 1e-3, "log": True, "when": {"model.depth": 20}},
    }, model={"name": "resnet"})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(10):
        trial = study.ask()
        s = space.sample(trial, cfg)
        assert ("weight_decay" in trial.params) == (s["model.depth"] == 20)
        study.tell(trial, 0.0)


def test_model_key_int_range_checked_value_by_value() -> None:
    import pytest

    from autotune.core.errors import ConfigError

    cfg_with({"model.depth": {"type": "int", "low": 8, "high": 20, "step": 6}}, model={"name": "resnet"})
    with pytest.raises(ConfigError, match=r"space\.model\.depth\.step: resnet depth must be 6n\+2.*got 9; use "
                                          r"type categorical"):
        cfg_with({"model.depth": {"type": "int", "low": 8, "high": 20}}, model={"name": "resnet"})
    with pytest.raises(ConfigError, match=r"space\.model\.width\.type: model key width takes an integer >= 1: use "
                                          r"type int or categorical"):
        cfg_with({"model.width": {"type": "float", "low": 8, "high": 20}}, model={"name": "resnet"})
    with pytest.raises(ConfigError, match=r"space\.model\.hidden\.low: hidden must be an integer >= 1; got 0"):
        cfg_with({"model.hidden": {"type": "int", "low": 0, "high": 20}}, model={"name": "mlp"})


def test_user_and_model_prefixes_side_by_side() -> None:
    import pytest

    from autotune.core.errors import ConfigError

    cfg = cfg_with({"model.hidden": {"type": "categorical", "choices": [8, 16]},
                    "lr": {"type": "float", "low": 1e-3, "high": 1e-2}}, model={"name": "mlp"})
    s = space.sample(optuna.create_study().ask(), cfg)
    settings, user = space.split(s)
    assert settings["model.hidden"] in (8, 16) and user == {}
    with pytest.raises(ConfigError, match=r"space\.user\.width: user parameters go to a training function"):
        cfg_with({"user.width": {"type": "categorical", "choices": [8, 16]}})
