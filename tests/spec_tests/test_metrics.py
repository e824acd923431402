"""metrics.py: the catalogue matches what a real training run measures, and every module reads it."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

import autotune
from autotune import config
from autotune.core.errors import ConfigError
from autotune.search import results
from autotune.spec import metrics
from autotune.training import EpochRecord
from tests.support import tiny


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> autotune.TrainResult:
    """One real built-in run that measures everything: per-epoch records and the after-training metrics."""
    cfg = tiny(tmp_path_factory.mktemp("m"), objectives=["val_accuracy", "inference_latency_ms"],
               train={"epochs": 2, "infer_batch_size": 64})
    return autotune.train(cfg)


def test_catalogue_says_what_is_known_each_epoch_and_what_only_at_the_end(measured: autotune.TrainResult) -> None:
    final = {k for k, v in measured.metrics().items() if not isinstance(v, bool)}  # pruned_shrunk is a flag
    assert final <= set(metrics.CATALOGUE), final - set(metrics.CATALOGUE)
    for rec in measured.history:
        per_epoch = set(rec.as_dict()) - {"epoch"}
        assert per_epoch <= set(metrics.PER_EPOCH), per_epoch - set(metrics.PER_EPOCH)
        assert not per_epoch & set(metrics.FINAL_ONLY)
    # every final-only metric of a classification run is measured, once, at the end
    assert {m for m in metrics.FINAL_ONLY if metrics.CATALOGUE[m].task in (None, "classification")} <= final
    # what the built-in trainer's evaluation reports is what the catalogue calls reported
    reported = set(measured.history[-1].metrics)
    assert reported <= set(metrics.REPORTED) and {"val_accuracy", "val_loss"} <= reported


def test_config_reads_directions_and_task_metrics_from_the_catalogue() -> None:
    assert metrics.DIRECTIONS == {m.name: m.direction for m in metrics.CATALOGUE.values() if m.objective}
    assert config.TASK_METRICS == {"classification": ("val_accuracy",), "regression": ("val_mse", "val_mae", "val_r2")}
    assert metrics.CLOCKS == tuple(m.name for m in metrics.CATALOGUE.values() if m.source == "clock")
    cfg = config.from_dict({"objectives": ["params_nonzero", "val_accuracy", "samples_per_s"]})
    assert cfg.directions == ["minimize", "maximize", "maximize"]


def test_a_metric_that_is_not_an_objective_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"objectives\.0\.metric: unknown metric 'compile_time_s'"):
        config.from_dict({"objectives": ["compile_time_s", "val_accuracy"]}, source=str(tmp_path / "x.yaml"))


def test_formats_labels_and_short_names() -> None:
    assert metrics.fmt("val_accuracy", 0.98765) == "0.9877"
    assert metrics.fmt("train_time_s", 12.345) == "12.35s"
    assert metrics.fmt("samples_per_s", 12345.6) == "12,346"
    assert metrics.fmt("model_size_bytes", 4096) == "4.0KiB"
    assert metrics.fmt("inference_latency_ms", 0.12345) == "0.123ms"
    assert metrics.fmt("val_f1", 0.123456) == "0.1235"  # a user's metric: plain
    assert metrics.fmt("user_time_s", 2) == "2.00s"  # ... in seconds when its name says so
    assert [metrics.fmt("val_loss", v) for v in (None, math.nan, math.inf)] == ["-", "-", "-"]
    assert metrics.label("train_time_s") == "training time (s)" and metrics.label("val_f1") == "val_f1"
    assert metrics.short("val_accuracy") == "acc" and metrics.short("val_f1") == "val_f1"
    assert metrics.shown_with(["val_f1", "train_time_s"]) == ["val_f1", "train_time_s", "val_accuracy",
                                                               "samples_per_s", "peak_memory_mb", "energy_j"]
    assert metrics.fmt("peak_memory_mb", 1234.4) == "1,234MB" and metrics.fmt("energy_j", 12.345) == "12.3J"


def test_quality_and_per_epoch_rules() -> None:
    assert metrics.is_quality("val_accuracy") and metrics.is_quality("val_f1")  # a user's metric is a quality
    assert not any(metrics.is_quality(m) for m in ("train_time_s", "model_params", "inference_latency_ms"))
    assert metrics.per_epoch("val_f1") and metrics.per_epoch("train_time_s")
    assert not metrics.per_epoch("model_size_bytes") and not metrics.per_epoch("compile_time_s")


def test_every_epoch_record_field_is_a_catalogued_per_epoch_metric() -> None:
    """EpochRecord's measured fields are the catalogue's `record` metrics, in its order: a new per-epoch clock is
    one catalogue row and one field, and the stored history, results and report follow."""
    fields = [f.name for f in dataclasses.fields(EpochRecord) if f.name not in ("epoch", "metrics", "epochs_planned")]
    assert tuple(fields) == metrics.EPOCH_FIELDS
    assert all(metrics.CATALOGUE[f].per_epoch for f in fields)
    # today's sets, derived: the record's clocks are the per-epoch clocks; train_loss is the one reported field
    assert metrics.EPOCH_FIELDS == ("train_loss", "epoch_time_s", "train_time_s", "samples_per_s",
                                    "data_wait_fraction", "lr", "peak_memory_mb", "energy_j")
    assert [f for f in fields if metrics.CATALOGUE[f].source == "clock"] == \
        [m for m in metrics.CLOCKS if metrics.CATALOGUE[m].per_epoch]
    rec = EpochRecord(epoch=1, train_loss=0.5, epoch_time_s=1.0, train_time_s=2.0, samples_per_s=3.0,
                      data_wait_fraction=0.1, lr=0.01, metrics={"val_accuracy": 0.9})
    assert list(rec.as_dict()) == ["epoch", "train_loss", "val_accuracy", "epoch_time_s", "train_time_s",
                                   "samples_per_s", "data_wait_fraction", "lr"]
    summary = results.TrialSummary(number=0, state="COMPLETE", params={}, values={}, metrics={},
                                   history=[rec.as_dict()])
    assert summary.records() == [rec]
    # a meter with nothing to read (energy on this CPU) is absent from the stored epoch, never zero
    metered = dataclasses.replace(rec, peak_memory_mb=512.0)
    assert list(metered.as_dict())[-1] == "peak_memory_mb" and "energy_j" not in metered.as_dict()
    assert results.TrialSummary(number=0, state="COMPLETE", params={}, values={}, metrics={},
                                history=[metered.as_dict()]).records() == [metered]


def test_every_metric_the_builtin_trainer_reports_is_catalogued(measured: autotune.TrainResult) -> None:
    reported = {k for rec in measured.history for k in rec.metrics}
    assert reported <= set(metrics.CATALOGUE), reported - set(metrics.CATALOGUE)
    assert all(metrics.CATALOGUE[k].source == "reported" for k in reported)
