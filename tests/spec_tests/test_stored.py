"""The stored-attrs catalogue (`TrialRecord`, `StudyRecord`): every key a trial or a study stores is a field (or a
metric, a probe reading), read back as written; and the only writers and readers of user attrs by name are the
records modules."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune import config
from autotune.fit import TrialPlan
from autotune.spec import CATALOGUE, EPOCH_FIELDS, StudyRecord, TrialRecord
from autotune.spec.stored import FIELDS, KEYS
from autotune.study import runner as study_mod
from autotune.study import write_study
from autotune.training import TrainResult

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "studies" / "tiny_study.yaml"

# one value per field, as a trial stores it
SAMPLE: dict[str, Any] = {
    "seed": 7, "settings": {"lr": 0.01, "user.width": 8}, "device": "cpu (x86_64, 2 threads)", "precision": "bf16",
    "warm_start": "old#3", "worker": "host:12:34", "probe": {"samples_per_s": 1e4, "source": "trial 0"},
    "history": [{"epoch": 1, "val_accuracy": 0.5, "train_time_s": 0.1}], "epoch_values": [[0.5, 0.1]],
    "metrics": {"val_accuracy": 0.5, "train_time_s": 0.1, "pruned_shrunk": True}, "epochs_run": 1,
    "meters": {"peak_memory_mb": "resident set"}, "not_applied": {"momentum": "adam has none"},
    "effective_lrs": [0.01], "own_group_lrs": [1.0], "recipe": {"lr_schedule": "linear"},
    "cpu_threads_capped": 1, "cpu_threads_used": 1,
    "oversubscribed": {"ratio": 0.3}, "oom_retried": True, "batch_size_used": 32, "pruning_off": "off",
    "stop_reason": "slow", "stop_epoch": 1, "stop_detail": "projected", "error": "ValueError: x", "surplus": True,
}


def test_every_field_is_stored_under_its_name_and_read_back() -> None:
    assert set(SAMPLE) == set(FIELDS), "a field without a sample value here (or a sample of no field)"
    record = TrialRecord(**SAMPLE)
    attrs = record.attrs()
    assert set(attrs) == KEYS | set(SAMPLE["metrics"])  # each field under its name, each metric under its own
    assert TrialRecord._read(attrs) == record
    assert TrialRecord().attrs() == {}  # nothing set, nothing stored


def test_no_metric_is_named_like_a_stored_field() -> None:
    """Metrics are stored flat, each under its own name: one named like a field would be read as that field. (The
    settings are stored inside `settings`: `device` and `precision` are both a setting and a field.)"""
    assert not KEYS & set(CATALOGUE)
    assert not KEYS & set(EPOCH_FIELDS)


def test_a_key_the_catalogue_does_not_know_is_a_metric_if_it_is_a_number() -> None:
    trial = optuna.trial.create_trial(value=1.0, user_attrs={"val_f1": 0.7, "note": "someone else's", "flag": False})
    record = TrialRecord.of(trial)
    assert record.metrics == {"val_f1": 0.7, "flag": False} and record.metric("val_f1") == 0.7
    assert record.metric("flag") is None and record.metric("missing") is None


def test_a_finished_trials_record_is_read_once() -> None:
    done = optuna.trial.create_trial(value=1.0, user_attrs={"seed": 3})
    assert TrialRecord.of(done) is TrialRecord.of(done) and TrialRecord.of(done).seed == 3
    running = optuna.trial.create_trial(state=optuna.trial.TrialState.RUNNING, user_attrs={"seed": 3})
    assert TrialRecord.of(running) is not TrialRecord.of(running)  # (its attrs may still change)


def test_what_a_study_stores_is_its_trials_records(tmp_path: Path) -> None:
    """A real study's every trial: its user attrs are exactly its record's (no key outside the catalogue but a
    measured metric's), and the metrics are the metrics catalogue's."""
    cfg = config.load(str(TINY), {"study.storage": f"sqlite:///{tmp_path}/t.db", "study.n_trials": 4})
    trials = study_mod.run(cfg).trials
    assert len(trials) == 4
    for t in trials:
        record = TrialRecord.of(t)
        assert record.attrs() == t.user_attrs, t.number
        assert set(record.metrics) <= set(CATALOGUE), set(record.metrics) - set(CATALOGUE)
        assert record.seed is not None and record.settings and record.worker and record.history


def test_a_trained_trials_record() -> None:
    """records.trained: the metrics, epochs, what did not apply (out of the stored settings), the fit's group rates,
    an early stop and the meters."""
    from autotune.study import records

    cfg = config.from_dict({"space": {"optimizer": {"type": "categorical", "choices": ["sgd", "adam"]}}})
    plan = TrialPlan.for_trial(cfg, {**cfg.fixed(), "optimizer": "adam", "user.width": 8}, 3)
    record = TrialRecord()
    records.planned(record, plan)
    assert (record.seed, record.precision) == (3, "fp32") and record.settings == dict(plan.point)
    result = TrainResult(final={"val_accuracy": 0.9}, train_time_s=1.0, samples_per_s=10.0, compile_time_s=0.0,
                         data_wait_fraction=0.0, epochs_run=2, device="cpu", precision="fp32", stopped_early_at=2,
                         not_applied={"optimizer": "your fit built its own"}, unused=["optimizer"],
                         effective_lrs=([1.0], [0.01]), meters={"energy_j": "no RAPL"})
    records.trained(record, plan, result)
    assert record.metrics == result.metrics() and record.epochs_run == 2
    assert record.not_applied == {"optimizer": "your fit built its own"} and "optimizer" not in (record.settings or {})
    assert (record.own_group_lrs, record.effective_lrs) == ([1.0], [0.01])
    assert (record.stop_reason, record.stop_epoch) == ("early_stopped", 2) and record.meters == {"energy_j": "no RAPL"}


PACKAGE = ROOT / "autotune"
RECORDS = {PACKAGE / "spec" / "stored.py", PACKAGE / "study" / "records.py"}


@pytest.mark.parametrize("pattern", [r"set_user_attr\(", r"set_trial_user_attr\(", r"user_attrs\[",
                                     r"user_attrs\.(get|items|keys|values)\(", r"in \S*user_attrs\b"])
def test_only_the_records_modules_write_or_read_attrs_by_name(pattern: str) -> None:
    """A trial's user attrs are its record's (written by study/records.py, read by TrialRecord.of), a study's its
    StudyRecord's: no other module of autotune writes or reads one by its name."""
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in sorted(PACKAGE.rglob("*.py"))
             if path not in RECORDS for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(pattern, line)]
    assert not found, "\n".join(found)


BENCH = ROOT / "bench"
PEERS_OWN = "MM_KEY"  # bench/replay_arms.py: OptunaHub multi_metric_pruner's own attr, which that peer reads


@pytest.mark.parametrize("pattern", [r"user_attrs\[", r"user_attrs\.(get|items|keys|values)\(", r"in \S*user_attrs\b",
                                     r"= [\w.]*\.user_attrs\b"])
def test_the_benchmarks_read_trials_through_their_records(pattern: str) -> None:
    """bench/ reads what a trial or a study stored through TrialRecord.of / StudyRecord.of, never an attr by name
    (a renamed field would otherwise read as missing there, silently)."""
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in sorted(BENCH.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(pattern, line) and PEERS_OWN not in line]
    assert not found, "\n".join(found)


def test_a_studys_record() -> None:
    study = optuna.create_study()
    write_study(study, StudyRecord(device="cpu", metrics=["val_accuracy"], probes={"probe:ab": {"samples_per_s": 1.0}}))
    study.set_user_attr("someone_elses", 1)
    record = StudyRecord.of(study)
    assert (record.device, record.metrics, record.probes) == ("cpu", ["val_accuracy"], {"probe:ab": {"samples_per_s":
                                                                                                     1.0}})
    assert record.attrs() == {k: v for k, v in study.user_attrs.items() if k != "someone_elses"}
    assert StudyRecord().attrs() == {}


def test_the_record_is_a_plain_dataclass() -> None:
    assert dataclasses.is_dataclass(TrialRecord) and all(f.default is None for f in dataclasses.fields(TrialRecord)
                                                          if f.name != "metrics")
