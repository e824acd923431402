"""objective.py: what a trial's values, stop reasons and records are, whichever way its training ends."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import autotune
from autotune import config
from autotune.study._objective import FailureStreak, Objective


def user_study(tmp_path: Path, fit: str, **sections: Any) -> config.RunConfig:
    raw: dict[str, Any] = {"study": {"name": "o", "storage": f"sqlite:///{tmp_path}/o.db", "n_trials": 1},
                           "trainer": f"tests.user_fits:{fit}", "train": {"epochs": 2, "batch_size": 64}}
    raw.update(sections)
    return config.from_dict(raw, source=str(tmp_path / "o.yaml"))


@pytest.mark.parametrize("objectives", [["val_accuracy"], ["val_accuracy", "train_time_s"]])
def test_non_finite_objective_on_the_last_epoch_stops_the_trial_diverged(tmp_path: Path,
                                                                          objectives: list[str]) -> None:
    t = autotune.run(user_study(tmp_path, "fit_nan_last_epoch", objectives=objectives)).study.trials[0]
    assert t.state.name == "PRUNED"
    # never a NaN in the study (Optuna keeps a pruned single-objective trial's last reported value: epoch 1's)
    assert t.values is None or all(math.isfinite(v) for v in t.values)
    assert t.user_attrs["stop_reason"] == "diverged" and t.user_attrs["stop_epoch"] == 2
    assert t.user_attrs["stop_detail"] == "non-finite val_accuracy (an objective)"
    assert len(t.user_attrs["history"]) == 2  # both epochs recorded: the stop came after training


def test_finite_objectives_complete_with_every_metric_recorded(tmp_path: Path) -> None:
    t = autotune.run(user_study(tmp_path, "fit")).study.trials[0]
    assert t.state.name == "COMPLETE"
    assert t.values == [t.user_attrs["val_accuracy"], t.user_attrs["train_time_s"]]
    assert {"samples_per_s", "val_loss", "epochs_run", "seed", "settings"} <= set(t.user_attrs)


@pytest.mark.parametrize("objectives,what", [
    ([{"metric": "val_bpb", "direction": "minimize"}, "train_time_s"], "Pareto pruning"),
    ([{"metric": "val_bpb", "direction": "minimize"}], "pruning"),
])
def test_an_objective_reported_only_at_the_end_says_pruning_is_off(tmp_path: Path, objectives: list[Any], what: str,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    cfg = user_study(tmp_path, "fit_reports_at_the_end", objectives=objectives, train={"epochs": 3, "batch_size": 64},
                     study={"name": "o", "storage": f"sqlite:///{tmp_path}/o.db", "n_trials": 2})
    with caplog.at_level("WARNING", logger="autotune.study._objective"):
        trials = autotune.run(cfg).study.trials
    text = f"{what} is off for this trial: val_bpb is not reported every epoch (ctx.report(val_bpb=...) in each epoch"
    for t in trials:
        assert t.state.name == "COMPLETE" and t.user_attrs["pruning_off"].startswith(text), t.user_attrs
    said = [r.getMessage() for r in caplog.records if "is off for this trial" in r.getMessage()]
    assert len(said) == 1 and "tests.user_fits:fit_reports_at_the_end" in said[0]  # once per run, not per trial
    every = user_study(tmp_path, "fit", objectives=["val_accuracy", "train_time_s"],
                       study={"name": "every", "storage": f"sqlite:///{tmp_path}/o.db", "n_trials": 1})
    assert "pruning_off" not in autotune.run(every).study.trials[0].user_attrs  # reported each epoch: on


def test_failure_streak_counts_the_same_error_in_a_row() -> None:
    streak = FailureStreak(3)
    assert not streak.saw("A") and not streak.saw("A")
    assert not streak.saw("B")  # a different error starts over
    assert not streak.saw("B") and streak.saw("B")
    streak.reset()
    assert not streak.saw("B")


def test_objective_metrics_split_into_per_epoch_and_final(tmp_path: Path) -> None:
    cfg = config.from_dict({"objectives": ["val_accuracy", "inference_latency_ms", "train_time_s"],
                            "study": {"storage": f"sqlite:///{tmp_path}/x.db"}})
    obj = Objective(cfg)
    assert obj.epoch_metrics == ["val_accuracy", "train_time_s"]
    assert obj.pareto is not None and obj.pareto.directions == ["maximize", "minimize"]
    assert obj.quality == ("val_accuracy", "maximize")
