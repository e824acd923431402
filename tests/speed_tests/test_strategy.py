"""study.strategy probe_then_tune: probe the acceleration combinations, drop the dominated, tune over the rest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from autotune import config
from autotune.core.errors import ConfigError
from autotune.speed import strategy
from autotune.speed import sweep as speed_mod
from autotune.speed.sweep import Row
from autotune.study import runner as study_mod
from autotune.training.throughput import Measurement
from tests import user_fits

ACCEL = {"precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
         "batch_size": {"type": "categorical", "choices": [32, 64]},
         "channels_last": {"type": "bool"}, "data_on_device": {"type": "bool"}}


def cfg_for(tmp_path: Path, space: dict[str, Any], fit: str = "fit", **study: Any) -> config.RunConfig:
    return config.from_dict({
        "study": {"name": "s", "storage": f"sqlite:///{tmp_path}/s.db", "n_trials": 4, "seed": 0,
                  "strategy": "probe_then_tune", "max_repeated_errors": 10, **study},
        "trainer": f"tests.user_fits:{fit}", "train": {"device": "cpu", "epochs": 2}, "pruning": {"pruner": "pareto"},
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}, **space}},
        source=str(tmp_path / "s.yaml"))


def row(sps: float | None, error: str | None = None, blame: str | None = None, **combo: Any) -> Row:
    m = None if sps is None else Measurement(sps, 1.0, 4, 0.1, 0.01, 0.0, 1000.0, None)
    return Row(combo, m, error, blame=blame)


def test_plan_drops_slower_and_less_exact_and_pins_the_fastest_neutral_settings(tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, ACCEL)
    rows = [
        row(1000, precision="fp32", batch_size=32, channels_last=False, data_on_device=True),
        row(1300, precision="fp32", batch_size=32, channels_last=True, data_on_device=True),  # fastest fp32 @ 32
        row(900, precision="bf16", batch_size=32, channels_last=True, data_on_device=True),  # slower, less exact
        row(1250, precision="bf16", batch_size=32, channels_last=False, data_on_device=True),  # within 10%: kept
        row(2000, precision="fp32", batch_size=64, channels_last=True, data_on_device=True),
        row(5000, precision="bf16", batch_size=64, channels_last=True, data_on_device=True),  # bf16 pays off @ 64
        row(None, error="RuntimeError: nope", blame="precision", precision="bf16", batch_size=64,
            channels_last=False, data_on_device=True),  # a failure of the setting: dropped
    ]
    plan = strategy.make_shortlist(cfg, rows)
    kept = {(g["numeric"]["precision"], g["numeric"]["batch_size"]): g["neutral"] for g in plan["groups"]}
    assert kept == {("fp32", 32): {"channels_last": True, "data_on_device": True},
                    ("bf16", 32): {"channels_last": False, "data_on_device": True},
                    ("fp32", 64): {"channels_last": True, "data_on_device": True},
                    ("bf16", 64): {"channels_last": True, "data_on_device": True}}
    why = {(d["combination"]["precision"], d["combination"]["batch_size"], d["combination"]["channels_last"]): d["why"]
           for d in plan["dropped"]}
    assert "computes at least as exactly at 1,300" in why[("bf16", 32, True)]
    assert "computes at least as exactly at 1,300" in why[("fp32", 32, False)]  # same numerics, 30% slower
    assert why[("bf16", 64, False)] == "RuntimeError: nope"
    narrow = strategy.narrowed(cfg, plan)
    assert set(narrow.space) == {"lr", "precision", "batch_size"}  # neutral settings: set, not searched
    assert strategy.pins(plan, {"precision": "bf16", "batch_size": 32}) == {"channels_last": False,
                                                                           "data_on_device": True}


def test_a_failure_of_the_users_code_drops_no_combination(tmp_path: Path) -> None:
    """A probe that failed in the user's code (no setting blamed) says nothing of the combination: it stays in
    the search (its trials fail or succeed on their own), unlike one whose setting failed."""
    cfg = cfg_for(tmp_path, ACCEL)
    rows = [row(1000, precision="fp32", batch_size=32, channels_last=False, data_on_device=True),
            row(None, error="KeyError: 'x'", precision="bf16", batch_size=32, channels_last=False,
                data_on_device=True),
            row(None, error="RuntimeError: no bf16 kernel", blame="precision", precision="bf16", batch_size=64,
                channels_last=False, data_on_device=True)]
    plan = strategy.make_shortlist(cfg, rows)
    kept = {(g["numeric"]["precision"], g["numeric"]["batch_size"]) for g in plan["groups"]}
    assert kept == {("fp32", 32), ("bf16", 32)}
    assert [d["why"] for d in plan["dropped"]] == ["RuntimeError: no bf16 kernel"]


def test_a_precision_slower_everywhere_leaves_the_space(tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, ACCEL)
    rows = [row(1000 if p == "fp32" else 300, precision=p, batch_size=b, channels_last=c, data_on_device=True)
            for p in ("fp32", "bf16") for b in (32, 64) for c in (False, True)]
    narrow = strategy.narrowed(cfg, strategy.make_shortlist(cfg, rows))
    assert "precision" not in narrow.space and narrow.train["precision"] == "fp32"
    assert narrow.space["batch_size"].choices == (32, 64)


def test_study_probes_once_and_searches_the_kept_combinations(tmp_path: Path) -> None:
    """channels_last fails here (fit_picky): probed once, dropped from the search; every trial then trains with
    channels_last false, which it no longer samples; a resumed run reuses the stored plan without probing."""
    user_fits.CALLS.clear()
    space = {"channels_last": {"type": "bool"}, "batch_size": {"type": "categorical", "choices": [32, 64]}}
    res = study_mod.run(cfg_for(tmp_path, space, fit="fit_picky"))
    plan = res.user_attrs[strategy.SHORTLIST_ATTR]
    # busy cores (other processes) can leave the two working rows contended, so not `measured`: the neutrals still
    # come from a row that trained, never from one that failed
    assert plan["combinations"] == 4 and plan["measured"] <= 2
    assert all(g["neutral"] == {"channels_last": False} for g in plan["groups"])
    probes = [c for c in user_fits.CALLS if c["epochs"] == 1_000_000]  # probes run the fit with endless epochs
    assert 4 <= len(probes) <= 4 + 2 * speed_mod.RETAKES  # a contended or noisy measured row is taken again
    trials = res.trials
    assert len(trials) == 4 and all(t.state == TrialState.COMPLETE for t in trials)
    assert all("channels_last" not in t.params and t.user_attrs["settings"]["channels_last"] is False for t in trials)
    before = len(user_fits.CALLS)
    study_mod.run(cfg_for(tmp_path, space, fit="fit_picky", n_trials=6))
    assert len(user_fits.CALLS) - before == 2  # two more trials, no probe


def test_unknown_strategy_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"study\.strategy: unknown strategy 'probe_first'; allowed: joint, "
                                          r"probe_then_tune"):
        cfg_for(tmp_path, {}, strategy="probe_first")
