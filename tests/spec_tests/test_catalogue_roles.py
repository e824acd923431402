"""Each row of the settings catalogue says how its setting acts and what applies it; the speed probe's, the
strategy's and the trial context's groups of settings are derived from that, and hold what they held when they
were hand-kept tuples."""

from __future__ import annotations

import pytest

from autotune.spec import APPLIERS, SETTINGS, acting, applied_by
from autotune.spec.settings import ACTS, Setting
from autotune.speed import probe, strategy, sweep
from autotune.training.context import applied
from autotune.training.data import augment


def test_every_setting_is_classified() -> None:
    for name, s in SETTINGS.items():
        assert s.acts in ACTS, name
        assert s.applied_by in APPLIERS, name
        if s.exactness:  # ranks every choice of a setting that trades exactness for speed
            assert s.acts == "speed_and_result" and {n for n, _ in s.exactness} == set(s.names), name


def test_a_row_without_its_roles_or_with_an_unknown_one_is_refused() -> None:
    with pytest.raises(TypeError):
        Setting(name="x", kind="bool", default=False, doc="x")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="setting x: acts must be one of result, speed, speed_and_result; got 'fast'"):
        Setting(name="x", kind="bool", default=False, doc="x", acts="fast", applied_by="around")
    with pytest.raises(ValueError, match="setting x: applied_by must be one of around, "):
        Setting(name="x", kind="bool", default=False, doc="x", acts="speed", applied_by="somewhere")
    with pytest.raises(ValueError, match="exactness ranks every name"):
        Setting(name="x", kind="choice", default="a", doc="x", names=("a", "b"), acts="speed_and_result",
                applied_by="around", exactness=(("a", 1),))


def test_the_speed_probe_and_strategy_sets_are_derived_and_unchanged() -> None:
    assert probe.THROUGHPUT == acting("speed", "speed_and_result")
    # the hand-kept tuple this replaced (same settings; the catalogue's order puts batch_size first)
    assert set(probe.THROUGHPUT) == {"device", "devices", "precision", "channels_last", "compile", "compile_mode",
                                     "batch_size", "data_on_device", "num_workers", "pin_memory", "prefetch_factor",
                                     "persistent_workers", "cudnn_benchmark", "matmul_precision", "cpu_threads"}
    assert sweep.ACCELERATION == tuple(k for k in probe.THROUGHPUT if k != "device")
    assert strategy.NEUTRAL == ("channels_last", "compile", "compile_mode", "data_on_device", "num_workers",
                                "pin_memory", "prefetch_factor", "persistent_workers", "cudnn_benchmark", "cpu_threads")
    assert set(strategy.NEUTRAL) < set(probe.THROUGHPUT)
    assert strategy.EXACTNESS == {"precision": {"fp32": 2, "bf16": 1, "fp16": 1},
                                  "matmul_precision": {"highest": 3, "high": 2, "medium": 1}}


def test_the_trial_contexts_groups_are_derived_and_unchanged() -> None:
    assert applied.APPLIED_AROUND == ("device", "devices", "cudnn_benchmark", "matmul_precision", "cpu_threads")
    assert set(applied.OPTIMIZER_KEYS) == {"optimizer", "lr", "momentum", "weight_decay"}
    assert set(applied.STEP_KEYS) == {"grad_clip", "grad_accum_steps", "lr_schedule"}
    assert applied.LOADER_KEYS == ("batch_size", "data_fraction", "data_on_device")
    assert applied.DATALOADER_KEYS == ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
    assert applied.PREPARE_KEYS == ("init", "channels_last", "compile", "compile_mode")
    assert set(applied.EFFECT_KEYS) == {"optimizer", "lr", "momentum", "weight_decay", "lr_schedule"}
    assert applied.BUILT_WITH == ("lr", "momentum", "weight_decay")
    assert applied.OWN == {
        "label_smoothing": "the loss is your own (read ctx.settings.label_smoothing in it to search it)",
        "dropout": "the model is your own (read ctx.settings.dropout in it to search it)",
        "aug_crop_padding": "the augmentation is your own", "aug_flip": "the augmentation is your own",
        "aug_cutout": "the augmentation is your own",
        "eval_batch_size": "your evaluation batches its own way (ctx.loader(..., train=False) takes it)",
        "epochs": "ctx.epochs() was never iterated",
    }
    assert augment.SETTINGS == applied_by("augment") == ("aug_crop_padding", "aug_flip", "aug_cutout")
