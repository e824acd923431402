"""objective.py and its stages: what a trial's values, stop reasons and records are, whichever way its training
ends."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

import autotune
from autotune import config
from autotune.core.watchdog import rss_mb
from autotune.spec import TrialRecord
from autotune.study.epoch_rules import StudyRules
from autotune.study.objective import Objective
from autotune.study.outcome import FailureStreak, RepeatedFailure
from autotune.training import EpochRecord
from tests import user_fits


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
    with caplog.at_level("WARNING", logger="autotune.study.objective"):
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


@pytest.mark.parametrize("objectives", [["val_accuracy"], ["val_accuracy", "train_time_s"]])
def test_a_fit_that_never_reports_counts_towards_repeated_errors(tmp_path: Path, objectives: list[str],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """The same ContextMisuse every trial is a repeated error (3 in a row stop the run), and a trial that reported
    nothing is not told its pruning is off."""
    cfg = user_study(tmp_path, "fit_never_reports", objectives=objectives, train={"epochs": 2, "batch_size": 64},
                     study={"name": "o", "storage": f"sqlite:///{tmp_path}/o.db", "n_trials": 6,
                            "max_repeated_errors": 3})
    with caplog.at_level("WARNING", logger="autotune.study.objective"), \
            pytest.raises(RepeatedFailure, match=r"^tests\.user_fits:fit_never_reports: 3 trials in a row failed "
                                                 r"with ContextMisuse: tests\.user_fits:fit_never_reports never "
                                                 r"called ctx\.report"):
        autotune.run(cfg)
    trials = optuna.load_study(study_name="o", storage=f"sqlite:///{tmp_path}/o.db").trials
    assert [t.state.name for t in trials] == ["FAIL"] * 3
    assert not any("pruning_off" in t.user_attrs for t in trials)
    assert not [r for r in caplog.records if "is off for this trial" in r.getMessage()]


def test_an_objective_the_first_trial_never_reported_stops_the_run_naming_what_it_reported(tmp_path: Path) -> None:
    """The same code reports the same names in every trial: the run stops at its first trial (not after three), with
    the config's key path and what the fit did report; the trial is stored failing with that line."""
    cfg = user_study(tmp_path, "fit_reports_loss_only", objectives=["val_accuracy", "train_time_s"],
                     study={"name": "o", "storage": f"sqlite:///{tmp_path}/o.db", "n_trials": 6})
    with pytest.raises(autotune.ConfigError) as e:
        autotune.run(cfg)
    assert str(e.value) == ("o.yaml: objectives.0.metric: tests.user_fits:fit_reports_loss_only "
                            "never reported val_accuracy (an objective) in its 2 epoch(s); it reported: val_loss")
    trials = optuna.load_study(study_name="o", storage=f"sqlite:///{tmp_path}/o.db").trials
    assert [t.state.name for t in trials] == ["FAIL"]
    assert "it reported: val_loss" in trials[0].user_attrs["error"]


@pytest.mark.parametrize("where", ["step", "evaluation"])
def test_a_fit_that_sleeps_forever_is_stopped_at_hang_seconds(tmp_path: Path, where: str) -> None:
    """No ctx call runs while the fit sleeps (in a step, or evaluating between epochs): the watchdog stops it."""
    cfg = user_study(tmp_path, "fit_sleeps_forever", train={"epochs": 2, "batch_size": 64, "user.where": where},
                     pruning={"slow": {"hang_seconds": 1.5}},
                     study={"name": "o", "storage": f"sqlite:///{tmp_path}/o.db", "n_trials": 2, "timeout": 60})
    t0 = time.monotonic()
    trials = autotune.run(cfg).study.trials
    assert time.monotonic() - t0 < 2 * 1.5 + 10  # each trial ends at its hang limit (+ start-up, a loaded machine)
    line = next(i for i, s in enumerate(Path(user_fits.__file__).read_text().splitlines(), 1)
                if "time.sleep(10_000)" in s and ("step" in s) == (where == "step"))
    for t in trials:
        assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "hang", t.user_attrs
        assert t.user_attrs["stop_epoch"] == 0
        assert t.user_attrs["stop_detail"] == ("trial wall time over hang_seconds 1.5 (hung or far too slow) "
                                               f"(at user_fits.py:{line} in fit_sleeps_forever)")


def test_the_run_timeout_holds_inside_a_trial(tmp_path: Path) -> None:
    cfg = user_study(tmp_path, "fit_sleeps_forever", train={"epochs": 2, "batch_size": 64, "user.where": "step"},
                     study={"name": "o", "storage": f"sqlite:///{tmp_path}/o.db", "n_trials": 5, "timeout": 2})
    t0 = time.monotonic()
    trials = autotune.run(cfg).study.trials
    assert time.monotonic() - t0 < 2 + 8
    # the run ended at its timeout, no trial after it; the trial it cut short FAILs (not a verdict on its settings)
    assert [t.state.name for t in trials] == ["FAIL"]
    assert trials[0].user_attrs["stop_reason"] == "timeout"
    assert trials[0].user_attrs["stop_detail"].startswith("the run's study.timeout (2 s) passed (at user_fits.py:")


@pytest.mark.parametrize("how", ["sys.exit", "exit"])
def test_sys_exit_in_a_fit_fails_its_trial_and_the_study_goes_on(tmp_path: Path, how: str) -> None:
    cfg = user_study(tmp_path, "fit_exits", train={"epochs": 1, "batch_size": 64, "user.how": how},
                     study={"name": "o", "storage": f"sqlite:///{tmp_path}/o.db", "n_trials": 2})
    trials = autotune.run(cfg).study.trials
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"]
    error = trials[0].user_attrs["error"]
    code = "3" if how == "sys.exit" else "None"  # exit() is SystemExit(None)
    assert error.startswith(f"SystemExit: {code} (at user_fits.py:")
    assert error.endswith("in <lambda>)")  # the user's line that exited


@pytest.mark.parametrize("oom", ["prune", "retry_smaller_batch"])
def test_a_cpu_out_of_memory_is_pruned_oom(tmp_path: Path, oom: str) -> None:
    """torch's own CPU allocation failure (a request no machine can meet) is an out-of-memory, as on CUDA."""
    cfg = user_study(tmp_path, "fit_host_oom_above_32", train={"epochs": 1, "batch_size": 64},
                     pruning={"oom": oom})
    t = autotune.run(cfg).study.trials[0]
    if oom == "prune":
        assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "oom", t.user_attrs
        assert "DefaultCPUAllocator: can't allocate memory" in t.user_attrs["stop_detail"]
    else:  # half the batch (32) fits
        assert t.state.name == "COMPLETE" and t.user_attrs["oom_retried"] and t.user_attrs["batch_size_used"] == 32


def test_host_memory_growing_past_the_cap_stops_the_trial_oom(tmp_path: Path) -> None:
    cap = (rss_mb() or 0) + 200
    cfg = user_study(tmp_path, "fit_hoards_memory", train={"epochs": 50, "batch_size": 64},
                     pruning={"max_host_memory_mb": cap})
    t = autotune.run(cfg).study.trials[0]
    assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "oom", t.user_attrs
    assert f"over pruning.max_host_memory_mb {cap:g}" in t.user_attrs["stop_detail"]
    # the user's line it was at: the fit's own, or the model's forward it called (where the check lands is timing)
    assert "(at user_fits.py:" in t.user_attrs["stop_detail"]
    assert t.user_attrs["stop_detail"].endswith(("in fit_hoards_memory)", "in forward)")), t.user_attrs["stop_detail"]
    assert (rss_mb() or 0) < cap  # the hoard was released with the trial


def test_the_study_stop_rules_read_each_epoch_as_the_context_measured_it(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Typed to the end: the study's stop rules are handed the trial's epochs as EpochRecords, nothing is flattened
    into the record while it runs, and what records.py writes is each epoch's `as_dict()` and its objectives."""
    seen: list[list[Any]] = []
    after_epoch = StudyRules.after_epoch

    def spy(self: StudyRules, trial: optuna.Trial, record: TrialRecord, history: Any, epochs: int) -> None:
        assert record.history is None and record.epoch_values is None  # (flattened only when it is written)
        seen.append(list(history))
        after_epoch(self, trial, record, history, epochs)

    monkeypatch.setattr(StudyRules, "after_epoch", spy)
    t = autotune.run(user_study(tmp_path, "fit")).study.trials[0]
    assert t.state.name == "COMPLETE"
    assert [len(h) for h in seen] == [1, 2] and all(isinstance(r, EpochRecord) for h in seen for r in h)
    assert seen[0][0] is seen[1][0]  # the same records, epoch after epoch
    last = seen[-1]
    assert t.user_attrs["history"] == [r.as_dict() for r in last]
    assert t.user_attrs["epoch_values"] == [[r.val_accuracy, r.train_time_s] for r in last]


def test_a_sampler_that_fails_while_sampling_stores_its_error_and_counts_towards_repeated_errors(
        tmp_path: Path) -> None:
    """sampler_args Optuna's constructor takes but its sampling cannot use (n_startup_trials: "abc"): each trial is
    stored failing with the sampler's own error, not an empty one, and the same error 2 times in a row stops the run
    naming it."""
    cfg = user_study(tmp_path, "fit", space={"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
                     objectives=["val_accuracy"],  # (one objective: TPE proposes every trial)
                     study={"name": "o", "storage": f"sqlite:///{tmp_path}/o.db", "n_trials": 4, "sampler": "tpe",
                            "sampler_args": {"n_startup_trials": "abc"}, "max_repeated_errors": 2})
    with pytest.raises(RepeatedFailure, match=r"2 trials in a row failed with TypeError"):
        autotune.run(cfg)
    trials = optuna.load_study(study_name="o", storage=f"sqlite:///{tmp_path}/o.db").trials
    assert [t.state.name for t in trials] == ["FAIL"] * 2
    assert all("TypeError" in str(TrialRecord.of(t).error) for t in trials)
