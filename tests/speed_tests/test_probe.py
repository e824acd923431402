"""The speed probe: steady samples/s from a few timed steps, kept in the study, used before a trial trains."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
import yaml
from optuna.trial import TrialState
from torch import nn

from autotune import config
from autotune import training as context
from autotune.fit import TrialPlan
from autotune.spec import TrialRecord
from autotune.spec.settings import DEFAULTS
from autotune.speed import probe
from autotune.study import runner as study_mod
from autotune.study import storage as storage_mod
from autotune.study import write_study
from autotune.training.throughput import ProbeDone, ProbeWindow, RepeatedWindow
from tests import user_fits

ROOT = Path(__file__).resolve().parents[2]


def plan_of(**point: Any) -> TrialPlan:
    """The plan of the default settings with `point` over them (user.NAME and model.KEY too)."""
    return TrialPlan.of(config.from_dict({}), {**DEFAULTS, **point}, 0)


def user(tmp_path: Path, fit: str, storage: str | None = None, **sections: Any) -> config.RunConfig:
    raw: dict[str, Any] = {
        "study": {"name": "p", "storage": storage or f"sqlite:///{tmp_path}/p.db", "n_trials": 3, "seed": 0,
                  "sampler": "random", "max_repeated_errors": 5},
        "trainer": f"tests.user_fits:{fit}",
        "train": {"epochs": 2, "batch_size": 64, "device": "cpu"},
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
    }
    for key, value in sections.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    return config.from_dict(raw, source=str(tmp_path / "p.yaml"))


def sleepy_steps(step_s: float, first_extra_s: float, steps: int = 40):
    """A training function whose steps take `step_s` (the first `first_extra_s` more, as a compile would)."""

    def fit(ctx: context.TrialContext) -> None:
        model, _ = ctx.prepare(nn.Linear(4, 2))
        train = ctx.loader((torch.randn(steps * 8, 4), torch.randint(0, 2, (steps * 8,))), batch_size=8)
        for _ in ctx.epochs():
            for i, (x, y) in enumerate(train):
                time.sleep(step_s + (first_extra_s if ctx._state.epoch == 1 and i == 0 else 0.0))
                ctx.backward(nn.functional.cross_entropy(model(x), y))
            ctx.report(val_loss=1.0)

    return fit


def ctx_with(window: ProbeWindow, epochs: int = 1) -> context.TrialContext:
    return context.TrialContext(context.TrainingPlan.bare({**DEFAULTS, "device": "cpu", "epochs": epochs}),
                                probe=window)


def test_window_times_steady_steps_after_warmup_and_sees_the_compile() -> None:
    window = ProbeWindow(steps=5, compiled=True)
    context.run_fit(sleepy_steps(0.02, 0.3), ctx_with(window))
    m = window.measurement
    assert m is not None and m.timed_steps >= 5
    # 8 samples per 20 ms step: at most 400 samples/s (sleep only ever oversleeps); a loaded machine, not 4x less
    assert 100 < m.samples_per_s <= 400
    assert 0.25 < m.compile_time_s < 1.5  # the slow first step, less a steady one
    assert m.epoch_samples == 40 * 8


def test_an_uncompiled_trial_has_no_compile_time(tmp_path: Path) -> None:
    """A slow first step without compile (allocator, caches) is the first step's, not compile's: the study's probe
    of an uncompiled combination records compile_time_s 0, and its first_step_s keeps the slow step."""
    cfg = user(tmp_path, "fit")
    study = study_mod.open_study(cfg)
    trial = study.ask()
    values = {**DEFAULTS, "device": "cpu", "epochs": 1, "compile": False}
    record = TrialRecord()
    gate = probe.Gate(cfg, write=write_study)
    window = gate.open(trial, TrialPlan.of(cfg, values, 0, number=trial.number), record).window()
    assert window is not None
    context.run_fit(sleepy_steps(0.02, 0.3), context.TrialContext(context.TrainingPlan.bare(values), probe=window))
    m = window.measurement
    assert m is not None and m.first_step_s > 0.25 and m.compile_time_s == 0.0
    assert record.probe is not None and record.probe["compile_time_s"] == 0.0


def test_repeated_windows_time_until_the_last_ones_agree() -> None:
    """Steps 3-6 are slow (a busy neighbour), the rest fast: windows of 2 steps go on past the slow ones until the
    last 3 agree, and the measurement is their median, not the slow start."""

    def fit(ctx: context.TrialContext) -> None:
        model, _ = ctx.prepare(nn.Linear(4, 2))
        train = ctx.loader((torch.randn(80, 4), torch.randint(0, 2, (80,))), batch_size=8)
        for _ in ctx.epochs():
            for i, (x, y) in enumerate(train):
                time.sleep(0.05 if 2 <= i < 6 else 0.005)
                ctx.backward(nn.functional.cross_entropy(model(x), y))
            ctx.report(val_loss=1.0)

    window = RepeatedWindow(end_run=True, warmup=2, steps=2, min_seconds=0.0, agree=3, tolerance=0.5,
                            max_windows=8)
    with pytest.raises(ProbeDone) as e:
        context.run_fit(fit, ctx_with(window, epochs=3))
    slow, fast = window.windows[0], e.value.measurement
    assert len(window.windows) == 5  # two slow windows, then three fast ones that agree
    assert fast.samples_per_s > 3 * slow.samples_per_s and window.spread <= 0.5
    assert fast in window.windows[-3:]


def test_a_probe_of_its_own_ends_the_run_after_its_steps() -> None:
    window = ProbeWindow(end_run=True, warmup=2, steps=3, min_seconds=0.0)
    ctx = ctx_with(window, epochs=50)
    with pytest.raises(ProbeDone) as e:
        context.run_fit(sleepy_steps(0.001, 0.0), ctx)
    assert e.value.measurement is window.measurement
    assert ctx._state.epoch == 1 and not ctx._state.history  # 5 steps of the first epoch, no evaluation


def test_the_window_pauses_over_what_is_not_training() -> None:
    """Epochs of 2 steps: the window spans epochs, and the evaluation between them (0.2 s) is not counted."""

    def fit(ctx: context.TrialContext) -> None:
        model, _ = ctx.prepare(nn.Linear(4, 2))
        train = ctx.loader((torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=8)
        for _ in ctx.epochs():
            for x, y in train:
                time.sleep(0.01)
                ctx.backward(nn.functional.cross_entropy(model(x), y))
            time.sleep(0.2)  # evaluation
            ctx.report(val_loss=1.0)

    window = ProbeWindow(warmup=1, steps=6, min_seconds=0.0)
    context.run_fit(fit, ctx_with(window, epochs=6))
    m = window.measurement
    assert m is not None
    assert m.timed_s < 0.2  # six 10 ms steps, not the three 0.2 s evaluations between them


def test_projected_time() -> None:
    rec = {"samples_per_s": 1000.0, "epoch_samples": 2000.0, "compile_time_s": 3.0}
    assert probe.time_at_reading_s(rec, plan_of(epochs=5, data_fraction=0.5)) == pytest.approx(3.0 + 5.0)
    assert probe.time_at_reading_s(rec, plan_of(epochs=5, time_excludes_compile=True)) == pytest.approx(10.0)
    assert probe.time_at_reading_s({"samples_per_s": 1000.0, "epoch_samples": None}, plan_of(epochs=5)) is None


def test_combination_is_what_sets_throughput() -> None:
    a = {"lr": 0.1, "batch_size": 64, "model.width": 16, "user.depth": 3}
    combo = probe.combination(plan_of(**a))
    assert combo["batch_size"] == 64 and combo["model.width"] == 16 and combo["user.depth"] == 3
    assert "lr" not in combo and "weight_decay" not in combo and "epochs" not in combo
    assert probe.key(combo, "cpu") == probe.key(probe.combination(plan_of(**{**a, "lr": 0.001})), "cpu")
    assert probe.key(combo, "cpu") != probe.key(combo, "cuda")


def test_too_slow_combination_stops_before_its_first_epoch(tmp_path: Path, quiet_cores: None) -> None:
    """The first trial measures its first steps and stops (slow, epoch 0); later ones never start training."""
    user_fits.CALLS.clear()
    cfg = user(tmp_path, "fit_picky", train={"epochs": 10, "user.sleep_ms": 20},
               pruning={"slow": {"max_trial_seconds": 1.0}})
    res = study_mod.run(cfg)
    trials = res.trials
    assert [t.state for t in trials] == [TrialState.PRUNED] * 3
    for t in trials:
        assert t.user_attrs["stop_reason"] == "slow" and t.user_attrs["stop_epoch"] == 0
        assert "(speed probe: trial 0, " in t.user_attrs["stop_detail"]  # the reading it rests on
        assert ") > max_trial_seconds 1" in t.user_attrs["stop_detail"]
        assert not t.user_attrs.get("history")  # no epoch ran to its end
        assert t.user_attrs["probe"]["source"] == "trial 0"
    assert len(user_fits.CALLS) == 1  # trials 1 and 2 were stopped before their training function ran
    records = [v for k, v in res.user_attrs.items() if k.startswith(probe.ATTR_PREFIX)]
    assert len(records) == 1 and records[0]["samples_per_s"] < 64 / 0.02


def test_a_settings_failure_is_found_once_then_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compile on a machine without a working C++ compiler: inductor itself fails (a failure of the setting, not of
    the user's code). The first trial fails with it; later trials with that combination stop before they train."""
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config.cpp, "cxx", ("/nonexistent/g++",))
    user_fits.CALLS.clear()
    cfg = user(tmp_path, "fit_picky", train={"epochs": 2, "batch_size": 64, "device": "cpu", "compile": True,
                                             "channels_last": False})
    res = study_mod.run(cfg)
    first, *rest = res.trials
    assert first.state == TrialState.FAIL and "No working C++ compiler" in first.user_attrs["error"]
    for t in rest:
        assert t.state == TrialState.PRUNED and t.user_attrs["stop_reason"] == "unsupported"
        assert t.user_attrs["stop_epoch"] == 0
        assert "failed here before (trial 0): InductorError" in t.user_attrs["stop_detail"]
    assert len(user_fits.CALLS) == 1
    (rec,) = [v for k, v in res.user_attrs.items() if k.startswith(probe.ATTR_PREFIX)]
    assert rec["blame"] == "compile" and rec["code"] == probe.code_fingerprint(user_fits.fit_picky)


def test_an_error_in_the_users_code_is_the_trials_own_failure(tmp_path: Path) -> None:
    """channels_last 'fails' in fit_picky's own code (a RuntimeError it raises): every trial with it runs, and
    fails, with its own text; nothing is recorded against the combination."""
    user_fits.CALLS.clear()
    cfg = user(tmp_path, "fit_picky", space={"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
                                             "channels_last": {"type": "categorical", "choices": [True]}})
    res = study_mod.run(cfg)
    assert [t.state for t in res.trials] == [TrialState.FAIL] * 3
    assert all("RuntimeError: no channels_last kernel" in t.user_attrs["error"] for t in res.trials)
    assert len(user_fits.CALLS) == 3  # each trial ran the user's function again
    assert not [k for k in res.user_attrs if k.startswith(probe.ATTR_PREFIX)]


def test_a_keyerror_in_user_code_is_fail_not_unsupported(tmp_path: Path) -> None:
    res = study_mod.run(user(tmp_path, "fit_raises"))
    trials = res.trials
    assert [t.state for t in trials] == [TrialState.FAIL] * 3
    for t in trials:
        assert t.user_attrs["stop_reason"] == "error"
        assert t.user_attrs["error"].startswith("KeyError: 'depth' (at user_fits.py:")


def test_one_transient_error_does_not_poison_the_combination(tmp_path: Path) -> None:
    """An OSError before training in trial 0 only: trial 0 fails with it, trials 1 and 2 run and complete."""
    marker = tmp_path / "failed-once"
    cfg = user(tmp_path, "fit_fails_once", train={"epochs": 2, "batch_size": 64, "device": "cpu",
                                                  "user.marker": str(marker)})
    res = study_mod.run(cfg)
    first, *rest = res.trials
    assert first.state == TrialState.FAIL and first.user_attrs["error"].startswith("OSError: [Errno 5] Input/output")
    assert [t.state for t in rest] == [TrialState.COMPLETE] * 2
    records = [v for k, v in res.user_attrs.items() if k.startswith(probe.ATTR_PREFIX)]
    assert len(records) == 1 and records[0]["samples_per_s"] > 0 and "error" not in records[0]


def test_an_untrusted_error_record_does_not_stop_trials(tmp_path: Path) -> None:
    """An error record an older autotune wrote (any early failure, no `blame`), or one written for other code, is
    not trusted: the combination is measured afresh and the trials train."""
    cfg = user(tmp_path, "fit", study={"n_trials": 2})
    study = study_mod.open_study(cfg)
    at = plan_of(device="cpu", batch_size=64, epochs=2)
    combo = probe.combination(at)
    k = probe.key(combo, probe.device_name(at))
    study.set_user_attr(k, probe.record(combo, probe.device_name(at), error="OSError: flaky", source="trial 0"))
    res = study_mod.run(cfg)
    assert [t.state for t in res.trials] == [TrialState.COMPLETE] * 2
    assert res.user_attrs[k]["samples_per_s"] > 0  # measured again, over the stale record
    gate = probe.Gate(cfg, user_fits.fit, write=write_study)
    other = probe.record(combo, "cpu", error="InductorError: x", blame="compile", code="another file")
    assert gate.trusted(other) is None
    assert gate.trusted({**other, "code": gate.code}) is not None


def test_vs_front_stops_a_projected_slow_trial_before_it_trains(tmp_path: Path, quiet_cores: None) -> None:
    """A combination measured 4x slower than the only (fast) front trial, with vs_front 2: stopped at epoch 0."""
    cfg = user(tmp_path, "fit_sleepy", study={"n_trials": 2}, space={
        "user.sleep_ms": {"type": "categorical", "choices": [0, 8]}}, pruning={"slow": {"vs_front": 2.0}},
        train={"epochs": 3, "batch_size": 64, "device": "cpu"})
    study = study_mod.open_study(cfg)
    study.enqueue_trial({"user.sleep_ms": 0})
    study.enqueue_trial({"user.sleep_ms": 8})
    res = study_mod.run(cfg)
    fast, slow = res.trials
    assert fast.state == TrialState.COMPLETE
    assert slow.state == TrialState.PRUNED and slow.user_attrs["stop_epoch"] == 0
    assert "slowest Pareto trial" in slow.user_attrs["stop_detail"]


def env() -> dict[str, str]:
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    e.pop("AUTOTUNE_WORKER_INDEX", None)
    return e


@pytest.mark.slow
def test_cache_shared_by_two_workers_and_a_resumed_run(tmp_path: Path) -> None:
    """Process 1 creates the study and measures the one combination; process 2 (`autotune worker`) and a resumed
    run in this process use that measurement: one record in the study, no trial of theirs measures again."""
    log = tmp_path / "p.log"
    cfg = user(tmp_path, "fit", storage=f"journal:///{log}", study={"n_trials": 2})
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    for cmd in (["run", str(path), "--plain"],
                ["worker", "--storage", f"journal:///{log}", "--study", "p", "--n-trials", "4",
                 "--trust-stored-code"]):  # (the study runs this test's own fit)
        out = subprocess.run([sys.executable, "-m", "autotune", *cmd], env=env(), cwd=tmp_path, capture_output=True,
                             text=True, timeout=180)
        assert out.returncode == 0, out.stderr
    res = study_mod.run(config.from_dict(cfg.to_dict(), overrides={"study.n_trials": 6}, source=str(path)))
    trials = res.trials
    assert len(trials) == 6 and all(t.state.is_finished() for t in trials)
    records = {k: v for k, v in res.user_attrs.items() if k.startswith(probe.ATTR_PREFIX)}
    assert len(records) == 1
    source = next(iter(records.values()))["source"]
    assert source in ("trial 0", "trial 1")
    assert all(t.user_attrs["probe"]["source"] == source for t in trials[2:])
    assert optuna.load_study(study_name="p", storage=storage_mod.make_storage(cfg)).user_attrs[
        next(iter(records))]["samples_per_s"] > 0


def test_a_shape_bug_traced_by_the_compiler_is_the_users_not_compiles() -> None:
    """Dynamo runs the user's forward on fake tensors: a shape bug of theirs surfaces from inside torch._dynamo,
    but it is their code's failure (eager mode fails the same way), so compile is not blamed."""
    import torch

    from autotune.speed import probe as probe_mod

    net = torch.compile(torch.nn.Linear(4, 3), backend="eager")
    try:
        net(torch.zeros(2, 5))
    except Exception as e:  # whatever dynamo raises for it
        assert probe_mod.blame(e, plan_of(compile=True, precision="fp32")) is None, type(e).__name__
    else:
        raise AssertionError("the shape bug did not raise")


def _probe_records(study: optuna.Study) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in study.user_attrs.items() if k.startswith(probe.ATTR_PREFIX)}


def test_a_contended_reading_steers_nothing_and_is_measured_again(tmp_path: Path) -> None:
    """29.1: a combination measured while busy processes held the cores (stored `contended: true`, here at a
    hundredth of its speed or less) stops no quiet trial as slow, on a resumed run too: the next trial measures it
    again and its reading replaces the contended one."""
    cfg = user(tmp_path, "fit", study={"n_trials": 1})
    study = study_mod.run(cfg)
    (k, quiet), = _probe_records(study).items()
    assert quiet["source"] == "trial 0"
    limit = 60.0  # the trials here train in well under a second; the planted figure projects 120 s
    planted = {**quiet, "samples_per_s": 2 * quiet["epoch_samples"] / (2 * limit), "contended": True,
               "source": "trial 0"}
    study.set_user_attr(k, planted)
    resumed = config.from_dict(cfg.to_dict(), overrides={"study.n_trials": 3,
                                                        "pruning.slow.max_trial_seconds": limit}, source=cfg.source)
    trials = study_mod.run(resumed).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3, [t.user_attrs.get("stop_detail") for t in trials]
    again = _probe_records(study)[k]
    assert again["contended"] in (False, True)  # said either way
    # trial 1 measures it again; on busy cores its reading is contended too, and trial 2 measures it once more
    by = int(again["source"].split()[1])
    assert by in (1, 2) and again["samples_per_s"] > planted["samples_per_s"]
    assert by == 1 or trials[1].user_attrs["probe"].get("contended"), trials[1].user_attrs["probe"]
    assert trials[by].user_attrs["probe"]["source"] == again["source"]  # its reference: its own reading
    if by == 1 and not again["contended"]:  # (the machine was quiet enough): trial 2 took it as its reference
        assert trials[2].user_attrs["probe"]["source"] == again["source"]


def test_a_probe_stop_names_the_reading_it_rests_on(tmp_path: Path) -> None:
    cfg = user(tmp_path, "fit", study={"n_trials": 1})
    study = study_mod.run(cfg)
    (k, rec), = _probe_records(study).items()
    study.set_user_attr(k, {**rec, "samples_per_s": 1.0, "contended": False, "source": "trial 0"})
    resumed = config.from_dict(cfg.to_dict(), overrides={"study.n_trials": 2, "pruning.slow.max_trial_seconds": 5},
                               source=cfg.source)
    t = study_mod.run(resumed).trials[1]
    assert t.user_attrs["stop_reason"] == "slow" and t.user_attrs["stop_epoch"] == 0
    assert t.user_attrs["stop_detail"].startswith("projected ")
    assert " at 1 samples/s (speed probe: trial 0, uncontended) > max_trial_seconds 5" in t.user_attrs["stop_detail"]
