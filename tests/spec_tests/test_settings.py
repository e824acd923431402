"""The settings catalogue: names of registry-backed settings, the one merge, and the typed frozen `Settings`."""

from __future__ import annotations

import copy
import pickle

import pytest

from autotune import compress, config
from autotune.core.errors import ConfigError
from autotune.search import space
from autotune.spec.settings import DEFAULTS, SETTINGS, Settings, merge
from autotune.training import models, optimizers


def test_registry_backed_choices_are_the_registries_keys() -> None:
    assert SETTINGS["optimizer"].choices == tuple(optimizers.OPTIMIZERS)
    assert SETTINGS["lr_schedule"].choices == tuple(optimizers.SCHEDULES)
    assert SETTINGS["init"].choices == tuple(models.INITS)
    assert SETTINGS["quantize"].choices == tuple(compress.QUANTIZERS)
    assert SETTINGS["prune_method"].choices == tuple(compress.prune.PRUNE_METHODS)
    assert SETTINGS["freeze"].choices == tuple(compress.transfer.FREEZERS)


def test_merge_layers_in_order() -> None:
    out = merge({"lr": 0.1, "epochs": 3}, {"lr": 0.2, "batch_size": 32}, {"batch_size": 16})
    assert out == {**DEFAULTS, "lr": 0.2, "epochs": 3, "batch_size": 16}


def test_sample_and_fixed_point_are_merges() -> None:
    cfg = config.from_dict({"train": {"epochs": 2}, "space": {
        "optimizer": {"type": "categorical", "choices": ["sgd", "adam"]},
        "momentum": {"type": "float", "low": 0.1, "high": 0.9, "when": {"optimizer": "sgd"}}}})
    point = space.fixed_point(cfg, {"optimizer": "adam"})
    assert point == merge(cfg.train, {"optimizer": "adam"})  # momentum inactive: its default
    import optuna

    trial = optuna.create_study().ask()
    sampled = space.sample(trial, cfg)
    assert sampled == merge(cfg.train, trial.params)


def test_settings_read_both_ways_and_typed() -> None:
    s = Settings({"lr": 1, "batch_size": 32.0, "model.width": 8})
    assert s["lr"] == s.lr == 1.0 and isinstance(s.lr, float)
    assert s.batch_size == 32 and isinstance(s.batch_size, int)
    assert s["model.width"] == 8
    assert s.optimizer == DEFAULTS["optimizer"] and len(s) == len(DEFAULTS) + 1  # every setting present
    assert dict(s) == {**DEFAULTS, "lr": 1.0, "batch_size": 32, "model.width": 8} and {**s}["lr"] == 1.0


def test_settings_are_frozen() -> None:
    s = Settings({"lr": 0.1})
    with pytest.raises(AttributeError, match=r"frozen"):
        s.lr = 0.2  # type: ignore[misc]
    with pytest.raises(TypeError):
        s["lr"] = 0.2  # type: ignore[index]
    with pytest.raises(AttributeError, match=r"no setting 'lrr' \(did you mean 'lr'\?\)"):
        _ = s.lrr
    t = s.replace(lr=0.3)
    assert (s.lr, t.lr) == (0.1, 0.3)
    assert Settings(s) is s


def test_settings_check_every_value() -> None:
    with pytest.raises(ConfigError, match=r"^<config>: lr: must be > 0; got -1.0$"):
        Settings({"lr": -1})
    with pytest.raises(ConfigError, match=r"^<config>: optimiser: unknown setting \(did you mean 'optimizer'\?\)"):
        Settings({"optimiser": "adam"})
    with pytest.raises(ConfigError, match=r"^<config>: optimizer: must be one of sgd, "):
        Settings({"optimizer": "adamm"})


def test_settings_survive_pickle_and_copy() -> None:
    s = Settings({"lr": 0.1, "model.channels": [8, 16]})
    for t in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s), copy.copy(s)):
        assert type(t) is Settings and t == s


def test_a_trial_context_hands_out_frozen_typed_settings() -> None:
    from autotune.training.context.trial import TrialContext

    ctx = TrialContext({"device": "cpu", "lr": 1, "epochs": 2})
    assert isinstance(ctx.settings, Settings) and ctx.settings.lr == ctx.settings["lr"] == 1.0
    assert ctx.settings.batch_size == DEFAULTS["batch_size"]  # a missing setting is its default
    with pytest.raises(TypeError):
        ctx.settings["lr"] = 2.0  # type: ignore[index]
