"""The sampler registry: every registered sampler, built as a study builds it, runs past its startup trials and
its own (model-based) proposals are the ones the trials get."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune import config
from autotune.core.errors import ConfigError
from autotune.search import samplers, space

FLOAT_SPACE = {
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "momentum": {"type": "float", "low": 0.0, "high": 0.95},
    "batch_size": {"type": "int", "low": 16, "high": 256, "log": True},
}
GRID_SPACE = {"batch_size": {"type": "categorical", "choices": [64, 128, 256]}, "channels_last": {"type": "bool"}}


def _relative_after(start: int, some: bool = False) -> Callable[[list[dict[str, Any]], int], bool]:
    """Model-based: from trial `start` on, every trial's parameters come from the sampler's joint model
    (`sample_relative` proposes all of them), where the startup trials had none from it. `some`: most later trials
    get some parameters from it (a genetic sampler's crossover; the rest are mutated, drawn at random)."""
    def check(relative: list[dict[str, Any]], n_params: int) -> bool:
        later = relative[start:]
        if some:
            return all(not r for r in relative[:start]) and sum(1 for r in later if r) >= len(later) / 2
        return all(not r for r in relative[:start]) and all(len(r) == n_params for r in later)
    return check


def _never_relative(relative: list[dict[str, Any]], n_params: int) -> bool:
    return all(not r for r in relative)


# name -> (sampler_args, trials to run, what its own path must show). A sampler added to the registry without a
# row here fails the contract test (KeyError): say how long its startup is and what it does after.
CONTRACT: dict[str, tuple[dict[str, Any], int, Callable[[list[dict[str, Any]], int], bool]]] = {
    "tpe": ({}, samplers.TPE_STARTUP_TRIALS + 4, _relative_after(samplers.TPE_STARTUP_TRIALS)),
    "gp": ({}, 10 + 3, _relative_after(10)),  # Optuna's GPSampler: 10 random trials, then a Gaussian process
    "cmaes": ({}, 12, _relative_after(1)),  # the first trial fixes the space; then CMA-ES proposes jointly
    "nsga2": ({}, 50 + 10, _relative_after(50, some=True)),  # a random first generation (population 50), then
    # offspring: crossover of two parents, each parameter mutated (drawn at random) with probability 1 / n
    "qmc": ({}, 8, _relative_after(1)),  # the first trial fixes the space; then the low-discrepancy sequence
    "random": ({}, 12, _never_relative),  # no model: each parameter drawn on its own
    "grid": ({}, 6, _never_relative),  # every grid point once (checked below)
}


def test_contract_covers_the_registry() -> None:
    assert set(CONTRACT) == set(samplers.SAMPLERS)


def cfg_for(name: str, args: dict[str, Any], tmp_path: Path) -> config.RunConfig:
    return config.from_dict({
        "study": {"sampler": name, "sampler_args": args, "seed": 0, "storage": f"sqlite:///{tmp_path}/s.db"},
        "objectives": ["val_loss"],
        "space": GRID_SPACE if name == "grid" else FLOAT_SPACE})


@pytest.mark.parametrize("name", samplers.SAMPLERS)
def test_every_sampler_runs_past_its_startup(name: str, tmp_path: Path) -> None:
    args, n_trials, own_path = CONTRACT[name]
    cfg = cfg_for(name, args, tmp_path)
    sampler = samplers.make_sampler(cfg)
    relative: list[dict[str, Any]] = []
    propose = sampler.sample_relative

    def spy(study: optuna.Study, trial: Any, search_space: Any) -> dict[str, Any]:
        out = propose(study, trial, search_space)
        relative.append(dict(out))
        return out

    sampler.sample_relative = spy  # type: ignore[method-assign]

    def objective(trial: optuna.Trial) -> float:
        s = space.sample(trial, cfg)  # the study's own path from a trial to settings
        if name == "grid":
            return float(s["batch_size"]) + float(s["channels_last"])
        return (s["momentum"] - 0.3) ** 2 + (len(str(s["batch_size"])) - 2) ** 2 + abs(s["lr"] - 3e-3)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=sampler, direction="minimize")
    study.optimize(objective, n_trials=n_trials)
    assert len(study.trials) == n_trials and all(t.state.name == "COMPLETE" for t in study.trials)
    assert len(relative) == n_trials
    assert own_path(relative, len(cfg.space)), (name, [sorted(r) for r in relative])
    if name == "grid":
        seen = {(t.params["batch_size"], t.params["channels_last"]) for t in study.trials}
        assert seen == {(b, c) for b in (64, 128, 256) for c in (False, True)}


def test_tpe_model_beats_its_startup(tmp_path: Path) -> None:
    """Past startup TPE's proposals concentrate where the objective is low: the model really steers."""
    cfg = cfg_for("tpe", {}, tmp_path)
    study = optuna.create_study(sampler=samplers.make_sampler(cfg), direction="minimize")
    study.optimize(lambda t: (space.sample(t, cfg)["momentum"] - 0.9) ** 2, n_trials=40)
    values = [t.value for t in study.trials]
    startup = values[:samplers.TPE_STARTUP_TRIALS]
    modelled = values[-10:]
    assert sorted(modelled)[len(modelled) // 2] < sorted(startup)[len(startup) // 2] / 4


def test_unknown_sampler_is_one_line_with_close_match(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        config.from_dict({"study": {"sampler": "tpee"}}, source=str(tmp_path / "s.yaml"))
    assert str(info.value) == "s.yaml: study.sampler: unknown sampler 'tpee' (did you mean 'tpe'?); allowed: " + \
        ", ".join(sorted(samplers.SAMPLERS))


def test_bad_sampler_args_name_the_sampler(tmp_path: Path) -> None:
    cfg = cfg_for("tpe", {"n_startup": 3}, tmp_path)
    with pytest.raises(ConfigError, match=r"study\.sampler_args: tpe: .*n_startup"):
        samplers.make_sampler(cfg)


def test_the_configs_sampler_checks_read_each_samplers_kind(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A sampler's limits are data (SamplerKind), not names in config/checks.py: a kind that says one objective, or
    a grid, is held to it whatever its name."""
    import dataclasses

    raw = {"study": {"sampler": "qmc", "storage": f"sqlite:///{tmp_path}/s.db"},
           "objectives": ["val_accuracy", "train_time_s"],
           "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1}}}
    config.from_dict(raw)
    qmc = samplers.SAMPLERS["qmc"]
    monkeypatch.setitem(samplers.SAMPLERS, "qmc", dataclasses.replace(qmc, objectives="one"))
    with pytest.raises(ConfigError, match=r"study\.sampler: qmc handles one objective only; for several use tpe, "
                                          r"random, gp, nsga2, grid"):
        config.from_dict(raw)
    monkeypatch.setitem(samplers.SAMPLERS, "qmc", dataclasses.replace(qmc, grid=True))
    with pytest.raises(ConfigError, match=r"space\.lr: the qmc sampler needs categorical, bool or stepped"):
        config.from_dict(raw)


def test_where_candidates_apply_is_read_from_the_samplers_kind(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """study.candidates draws from a sampler that proposes a parameter at a time: its SamplerKind says so, not a
    list of names (search/predicted.py reads the kind)."""
    from dataclasses import replace

    from autotune.search import predicted

    def cfg(sampler: str) -> config.RunConfig:
        objectives = [{"metric": "val_accuracy", "direction": "maximize"},
                      {"metric": "train_time_s", "direction": "minimize"}]
        return config.from_dict({"study": {"name": "k", "storage": f"sqlite:///{tmp_path}/k.db", "sampler": sampler},
                                 "objectives": objectives, "space": FLOAT_SPACE}, source=str(tmp_path / "k.yaml"))

    drawn = {name for name, kind in samplers.SAMPLERS.items() if kind.proposes == "parameter"}
    assert drawn == {"tpe", "random"}
    for name in ("tpe", "random", "gp", "nsga2", "qmc"):
        assert predicted.applies(cfg(name)) == (name in drawn)
    monkeypatch.setitem(samplers.SAMPLERS, "gp", replace(samplers.SAMPLERS["gp"], proposes="parameter"))
    assert predicted.applies(cfg("gp")) and predicted.n_candidates(cfg("gp")) == predicted.AUTO_K
