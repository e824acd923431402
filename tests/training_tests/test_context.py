"""The trial context: users' own training functions get every setting, clock and stop rule."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch

import autotune
from autotune import config
from autotune.core.errors import ConfigError, TrialStopped
from autotune.spec import Settings
from autotune.spec.settings import DEFAULTS
from autotune.study.runner import open_study
from autotune.training import ContextMisuse, TrainingPlan, TrialContext, accel
from autotune.training.context import limits as stops
from autotune.training.context import trial as context
from autotune.training.throughput import ProbeWindow
from tests import user_fits
from tests.support import ROOT, user


def ctx_for(**settings: Any) -> TrialContext:
    return TrialContext({**DEFAULTS, "device": "cpu", **settings})


# ---------------------------------------------------------------- a user's loop trains, measured like the built-in


def test_user_fit_trains_and_is_measured(tmp_path: Path) -> None:
    r = autotune.train(user(tmp_path, train={"epochs": 3}))
    assert r.val_accuracy > 0.9
    assert r.epochs_run == 3 and len(r.history) == 3
    assert r.train_time_s == pytest.approx(sum(h.epoch_time_s for h in r.history))
    for h in r.history:  # samples come from the batches that passed through ctx.loader: 600 per epoch
        assert h.samples_per_s * h.epoch_time_s == pytest.approx(600, rel=1e-6)
        assert 0 <= h.data_wait_fraction < 1 and h.train_loss > 0
    assert r.history[-1].train_loss < r.history[0].train_loss
    assert r.metrics()["val_loss"] == r.history[-1].metrics["val_loss"]


def test_user_parameters_and_conditions_reach_the_function(tmp_path: Path) -> None:
    space = {"user.width": {"type": "categorical", "choices": [8, 64]},
             "user.depth": {"type": "int", "low": 1, "high": 3, "when": {"user.width": 64}}}
    cfg = user(tmp_path, space=space, study={"n_trials": 4, "sampler": "random"}, train={"epochs": 1})
    res = autotune.run(cfg)
    for t in res.study.trials:
        assert t.state.name == "COMPLETE"
        assert ("user.depth" in t.params) == (t.params["user.width"] == 64)
        assert t.user_attrs["settings"]["user.width"] == t.params["user.width"]


def test_user_metric_drives_a_pareto_study(tmp_path: Path) -> None:
    cfg = user(tmp_path, "fit_mae", objectives=[{"metric": "val_mae", "direction": "minimize"}, "train_time_s"],
               space={"user.width": {"type": "categorical", "choices": [4, 64]}}, study={"n_trials": 3},
               train={"epochs": 3, "lr": 1e-2})
    res = autotune.run(cfg)
    done = [t for t in res.study.trials if t.state.name == "COMPLETE"]
    assert done and all(t.values[0] == pytest.approx(t.user_attrs["val_mae"]) for t in done)
    for t in done:  # per-epoch records of the user metric, and real learning in them
        maes = [h["val_mae"] for h in t.user_attrs["history"]]
        assert len(maes) == 3 and maes[-1] < maes[0]
    assert res.best is not None and res.best.number in {s.number for s in res.pareto}


# ---------------------------------------------------------------- each acceleration setting takes effect


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_precision_inside_autocast_and_grad_scaler_only_for_fp16(tmp_path: Path, precision: str) -> None:
    r = autotune.train(user(tmp_path, "fit_probe", train={"epochs": 1, "precision": precision}))
    want = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    assert user_fits.PROBE and {p["conv_dtype"] for p in user_fits.PROBE} == {want}
    assert (user_fits.SEEN["scaler"] is not None) == (precision == "fp16")
    assert (r.loss_scale is not None) == (precision == "fp16")


def test_channels_last_reaches_model_and_inputs(tmp_path: Path) -> None:
    autotune.train(user(tmp_path, "fit_probe", train={"epochs": 1, "channels_last": True}))
    assert user_fits.PROBE and all(p["channels_last"] for p in user_fits.PROBE)
    assert user_fits.SEEN["model"].conv.weight.is_contiguous(memory_format=torch.channels_last)
    autotune.train(user(tmp_path, "fit_probe", train={"epochs": 1, "channels_last": False}))
    assert not any(p["channels_last"] for p in user_fits.PROBE)


def test_setting_the_model_cannot_use_is_reported(tmp_path: Path) -> None:
    r = autotune.train(user(tmp_path, train={"epochs": 1, "channels_last": True}))  # an MLP: nothing 4-D
    assert "channels_last" in r.not_applied and "2-D convolution" in r.not_applied["channels_last"]
    cfg = user(tmp_path, train={"epochs": 1, "channels_last": True}, study={"n_trials": 1})
    t = autotune.run(cfg).study.trials[0]
    assert "channels_last" in t.user_attrs["not_applied"]


def test_backend_flags_set_during_the_trial_and_restored(tmp_path: Path) -> None:
    before = (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32,
              torch.get_num_threads())
    autotune.train(user(tmp_path, "fit_probe", train={"epochs": 1, "cudnn_benchmark": not before[0],
                                                      "matmul_precision": "medium", "cpu_threads": 1}))
    seen = user_fits.SEEN
    assert seen["cudnn_benchmark"] == (not before[0]) and seen["matmul"] == "medium" and seen["conv_tf32"] is True
    assert seen["threads"] == 1
    autotune.train(user(tmp_path, "fit_probe", train={"epochs": 1, "matmul_precision": "highest"}))
    assert user_fits.SEEN["conv_tf32"] is False  # "fp32" means fp32 convolutions too, not TF32
    assert (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32,
            torch.get_num_threads()) == before


def test_grad_accumulation_steps_the_optimizer_every_k_micro_batches(tmp_path: Path) -> None:
    # 128 images at batch 32: 4 micro-batches per epoch; k=3 steps after 3 and at the epoch's end (the tail)
    autotune.train(user(tmp_path, "fit_probe", train={"epochs": 2, "batch_size": 32, "grad_accum_steps": 3}))
    opt = user_fits.SEEN["opt"]
    assert {int(s["step"]) for s in opt.state.values()} == {4}
    autotune.train(user(tmp_path, "fit_probe", train={"epochs": 2, "batch_size": 32, "grad_accum_steps": 1}))
    assert {int(s["step"]) for s in user_fits.SEEN["opt"].state.values()} == {8}


def test_grad_clip_bounds_the_update() -> None:
    ctx = ctx_for(optimizer="sgd", momentum=0.0, lr=1.0, grad_clip=0.01, epochs=1)
    model, _ = ctx.prepare(torch.nn.Linear(8, 3))
    before = [p.detach().clone() for p in model.parameters()]
    train = ctx.loader(user_fits.blobs(64))
    for _ in ctx.epochs():
        for x, y in train:
            ctx.backward(torch.nn.functional.cross_entropy(model(x), y) * 1000)  # a huge gradient
            break
        ctx.report()
    step = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
    assert 0 < float(step.norm()) <= 0.01 + 1e-6


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_weight_decay_shrinks_weights_with_zero_gradient(name: str) -> None:
    """One step on a zero gradient: with weight decay w the weights are multiplied by 1 - lr * w (SGD's L2 and
    AdamW's decoupled decay alike; Adam's update of a zero gradient is zero); without it they stay put."""
    for wd in (0.5, 0.0):
        ctx = ctx_for(optimizer=name, momentum=0.0, lr=0.1, weight_decay=wd, epochs=1)
        model, _ = ctx.prepare(torch.nn.Linear(8, 3))
        before = [p.detach().clone() for p in model.parameters()]
        for _ in ctx.epochs():
            x, _y = next(iter(ctx.loader(user_fits.blobs(64))))
            ctx.backward((model(x) * 0.0).sum())  # a zero gradient: only the decay moves the weights
            ctx.report()
        for p, b in zip(model.parameters(), before):
            torch.testing.assert_close(p.detach(), b * (1 - 0.1 * wd))


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune"])
def test_compile_mode_reaches_torch_compile(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(torch, "compile", lambda model, **kw: calls.append(kw) or model)
    ctx_for(compile=True, compile_mode=mode).prepare(torch.nn.Linear(4, 2))
    assert calls == [{"mode": None if mode == "default" else mode}]
    ctx_for(compile=False, compile_mode=mode).prepare(torch.nn.Linear(4, 2))
    assert len(calls) == 1  # no compile, no mode


class _CompilesOnFirstCall(torch.nn.Module):
    """A stand-in for a compiled module whose compile costs a known 1.5 s on its first call. A real compile's cost
    is not repeatable in one process: inductor's caches brought a second compile of the same model from 4 s to
    milliseconds here, and time_excludes_compile is about the clocks' accounting, not about inductor."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.compiled = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.compiled:
            __import__("time").sleep(1.5)
            self.compiled = True
        return self.inner(x)


def test_time_excludes_compile_leaves_compile_out_of_train_time(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accel, "compile_model", lambda model, mode: _CompilesOnFirstCall(model))
    monkeypatch.setattr(accel, "reset_compiler", lambda: None)
    runs = {ex: autotune.train(user(tmp_path, "fit_probe", train={"epochs": 2, "compile": True,
                                                                  "time_excludes_compile": ex}))
            for ex in (False, True)}
    for r in runs.values():
        assert r.compile_time_s >= 1.4  # the first step's extra time, measured
        assert r.train_time_s == pytest.approx(sum(h.epoch_time_s for h in r.history))
    assert runs[False].history[0].epoch_time_s >= 1.5  # the first epoch holds the compile
    assert runs[True].history[0].epoch_time_s < runs[False].history[0].epoch_time_s - 1.3  # ... or leaves it out
    assert runs[True].train_time_s < runs[False].train_time_s - 1.3


def test_lr_schedule_follows_the_steps() -> None:
    ctx = ctx_for(optimizer="sgd", lr=0.1, lr_schedule="cosine", epochs=2, batch_size=100)
    model, opt = ctx.prepare(torch.nn.Linear(8, 3))
    train = ctx.loader(user_fits.blobs(200))
    for _ in ctx.epochs():
        for x, y in train:
            ctx.backward(torch.nn.functional.cross_entropy(model(x), y))
        ctx.report()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-9)  # cosine over 2 x 2 steps ends at zero
    # each epoch's lr: the mean of the lrs its steps took (0.1, 0.0854 | 0.05, 0.0146), not the lr after it
    assert [round(h.lr, 4) for h in ctx._state.history] == [0.0927, 0.0323]


def test_data_loader_path_for_a_dataset_and_data_fraction(tmp_path: Path) -> None:
    r = autotune.train(user(tmp_path, "fit_dataset", train={"epochs": 2, "num_workers": 1,
                                                            "persistent_workers": True}))
    assert r.val_accuracy > 0.8
    assert "data_on_device" in r.not_applied  # a map-style Dataset is not tensors: it said so
    assert user_fits.SEEN["loader_batches"] == 10  # 600 samples at 64
    half = autotune.train(user(tmp_path, "fit_dataset", train={"epochs": 1, "data_fraction": 0.5}))
    assert half.history[0].samples_per_s * half.history[0].epoch_time_s == pytest.approx(300, rel=1e-6)


def test_data_fraction_is_stratified_for_tensors() -> None:
    ctx = ctx_for(data_fraction=0.25, batch_size=1000)
    x, y = user_fits.blobs(600)
    batches = list(ctx.loader((x, y)).untimed())
    kept = batches[0][1]
    assert len(kept) == sum(max(1, round(int((y == c).sum()) * 0.25)) for c in y.unique())
    assert set(kept.tolist()) == set(y.tolist())


@pytest.mark.parametrize("on_device", [True, False])
def test_batches_have_the_dataset_they_batch(on_device: bool) -> None:
    ctx = ctx_for(data_fraction=0.5, batch_size=64, data_on_device=on_device)
    train = ctx.loader((user_fits.X, user_fits.Y))
    assert len(train.dataset) == sum(len(b[0]) for b in train.untimed()) == pytest.approx(300, abs=3)
    x0, y0 = train.dataset[0]
    assert x0.shape == user_fits.X[0].shape and y0.ndim == 0
    ds = ctx.loader(user_fits.PairDataset(), train=False)  # a Dataset: itself (evaluation: all of it)
    assert isinstance(ds.dataset, user_fits.PairDataset) and len(ds.dataset) == len(user_fits.Y)
    assert len(ctx.loader(user_fits.PairDataset()).dataset) == 300  # training: data_fraction of it, a Subset


def test_compiled_training_loader_drops_the_short_last_batch() -> None:
    plain = ctx_for(batch_size=48).loader((user_fits.IMAGES, user_fits.LABELS))
    compiled = ctx_for(batch_size=48, compile=True).loader((user_fits.IMAGES, user_fits.LABELS))
    assert len(plain) == 3 and [len(b[0]) for b in plain.untimed()] == [48, 48, 32]
    assert len(compiled) == 2 and [len(b[0]) for b in compiled.untimed()] == [48, 48]


def test_compiler_is_reset_around_every_compiled_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(accel, "reset_compiler", lambda: calls.append(1))
    with context.trial_session(Settings({**DEFAULTS, "compile": True})):
        pass
    assert len(calls) == 2  # before (a fresh graph, honest compile time) and after (free the graphs)
    with context.trial_session(Settings(DEFAULTS)):
        pass
    assert len(calls) == 2


@pytest.mark.slow
def test_compiled_user_trials_each_compile_and_report_it(tmp_path: Path) -> None:
    times = []
    for _ in range(2):  # the same structure twice: the second is traced afresh, not run on the first's graph
        user_fits.PROBE.clear()
        r = autotune.train(user(tmp_path, "fit_probe", train={"epochs": 2, "compile": True}))
        assert any(p["compiling"] for p in user_fits.PROBE)  # the model really ran compiled, in this trial
        assert user_fits.SEEN["model"]._orig_mod is not None
        times.append(r.compile_time_s)
    # the second trial ran compiled too (no recompile limit, no stale graph); its compile time is measured, and
    # may be ~0: inductor keeps compiled kernels in memory past torch.compiler.reset(), so tracing is all it pays
    assert all(t >= 0 for t in times) and any(t > 0 for t in times), times


def test_cuda_graph_modes_with_accumulation_are_unsupported(tmp_path: Path) -> None:
    cfg = user(tmp_path, train={"compile": True, "compile_mode": "reduce-overhead", "grad_accum_steps": 2},
               study={"n_trials": 1})
    t = autotune.run(cfg).study.trials[0]
    assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "unsupported"
    assert "CUDA graphs" in t.user_attrs["stop_detail"]


def _loop_ending(ctx: TrialContext, model: torch.nn.Module, how: str, steps: int = 3) -> None:
    """`steps` training steps of an epoch, the loop ending `how`: it breaks out of ctx.loader (airbench), takes
    batches of its own (nanoGPT's get_batch), or runs the loader out."""
    x, y = user_fits.X, user_fits.Y
    if how == "own":
        for i in range(steps):
            xb, yb = x[i * 50:(i + 1) * 50], y[i * 50:(i + 1) * 50]
            ctx.backward(torch.nn.functional.cross_entropy(model(xb), yb), n_samples=len(xb))
        return
    for i, (xb, yb) in enumerate(ctx.loader((x[:50 * steps], y[:50 * steps]) if how == "exhausted" else (x, y))):
        if how == "break_before" and i == steps:  # the batch taken last is not trained on
            break
        ctx.backward(torch.nn.functional.cross_entropy(model(xb), yb))
        if how == "break" and i + 1 == steps:
            break


@pytest.mark.parametrize("how", ["break", "break_before", "own", "exhausted"])
def test_training_clock_stops_at_the_last_step_however_the_loop_ends(how: str) -> None:
    ctx = ctx_for(epochs=2, batch_size=50, lr=1e-2)
    model, _ = ctx.prepare(user_fits.MLP())
    for _ in ctx.epochs():
        _loop_ending(ctx, model, how)
        __import__("time").sleep(0.3)  # evaluation: not training
        ctx.report(val_loss=1.0)
    for h in ctx._state.history:
        assert h.epoch_time_s < 0.15, (how, h.epoch_time_s)  # three tiny steps, not the 0.3 s after them
        assert h.samples_per_s * h.epoch_time_s == pytest.approx(150, rel=1e-6)  # the samples trained on
    assert ctx._state.result().train_time_s == pytest.approx(sum(h.epoch_time_s for h in ctx._state.history))


def test_a_trial_over_max_trial_seconds_only_in_its_last_epoch_completes(tmp_path: Path) -> None:
    cfg = user(tmp_path, "fit_slow_last_epoch", train={"epochs": 3, "user.last_sleep_s": 1.2}, study={"n_trials": 1},
               pruning={"slow": {"max_trial_seconds": 1.0, "vs_front": 1.5}})
    t = autotune.run(cfg).study.trials[0]
    assert t.state.name == "COMPLETE", t.user_attrs  # its training was done: no rule throws it away
    assert t.user_attrs["train_time_s"] > 1.0 and len(t.user_attrs["history"]) == 3
    with pytest.raises(TrialStopped, match="max_trial_seconds"):  # the rule still acts before the last epoch
        stops.check_slow(2.1, 2, 3, 3.0)
    stops.check_slow(9.0, 3, 3, 3.0)


def test_finished_training_is_not_stopped_by_the_hang_limit_or_the_probe() -> None:
    """The last epoch's training done, neither a batch taken and not trained on past hang_seconds nor the speed
    probe's verdict at the epoch's end throws it away."""
    def too_slow(m: Any) -> None:
        raise TrialStopped("slow", 0, "projected too slow (speed probe)")

    window = ProbeWindow(on_measured=too_slow, min_seconds=60.0)  # measured at the epoch's end
    ctx = TrialContext(TrainingPlan.bare({**DEFAULTS, "device": "cpu", "epochs": 1, "batch_size": 50},
                                         limits=stops.Limits(hang_seconds=1.0)), probe=window)
    model, _ = ctx.prepare(user_fits.MLP())
    for _ in ctx.epochs():
        for i, (x, y) in enumerate(ctx.loader((user_fits.X, user_fits.Y))):
            if i == 9:  # its step count reached: the batch just taken is not trained on
                break
            ctx.backward(torch.nn.functional.cross_entropy(model(x), y))
            if i == 8:
                __import__("time").sleep(1.1)  # the hang limit passes during the last step
        ctx.report(val_loss=1.0)
    assert window.done and ctx._state.stop is None and len(ctx._state.history) == 1


def _own_batches(ctx: TrialContext, model: torch.nn.Module, steps: int, per_sample: bool = False) -> None:
    """nanoGPT's shape: batches from a get_batch of its own, not from ctx.loader."""
    for i in range(steps):
        xb, yb = user_fits.X[i * 40:(i + 1) * 40], user_fits.Y[i * 40:(i + 1) * 40]
        if per_sample:  # an unreduced loss: its first dimension is the batch
            ctx.backward(torch.nn.functional.cross_entropy(model(xb), yb, reduction="none"))
        else:
            ctx.backward(torch.nn.functional.cross_entropy(model(xb), yb), n_samples=len(xb))


@pytest.mark.parametrize("per_sample", [False, True])
def test_own_batches_count_their_samples_for_the_epoch_and_the_probe(per_sample: bool) -> None:
    window = ProbeWindow(warmup=2, steps=4, min_seconds=0.0)
    ctx = TrialContext(TrainingPlan.bare({**DEFAULTS, "device": "cpu", "epochs": 2, "lr_schedule": "cosine",
                                          "optimizer": "sgd", "lr": 0.1}), probe=window)
    model, opt = ctx.prepare(user_fits.MLP())
    for _ in ctx.epochs(steps_per_epoch=10):  # the schedule's length: no ctx.loader says it here
        _own_batches(ctx, model, 10, per_sample)
        ctx.report(val_loss=1.0)
    for h in ctx._state.history:
        assert h.samples_per_s * h.epoch_time_s == pytest.approx(400, rel=1e-6)  # 10 steps of 40 samples
        assert h.train_loss > 0
    m = window.measurement
    assert m is not None and m.samples_per_s == pytest.approx(40 * m.steps_per_s)  # samples/s, not steps/s
    assert m.epoch_samples == pytest.approx(400)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-9)  # cosine over 2 x 10 steps ends at zero


def test_own_batches_without_a_sample_count_are_refused_clearly() -> None:
    ctx = ctx_for(epochs=1)
    model, _ = ctx.prepare(user_fits.MLP())
    with pytest.raises(ContextMisuse, match=r"ctx\.backward\(loss\): this step's batch did not come from a "
                                            r"training ctx\.loader.*pass ctx\.backward\(loss, n_samples=len\(x\)\)"):
        for _ in ctx.epochs():
            ctx.backward(torch.nn.functional.cross_entropy(model(user_fits.X[:8]), user_fits.Y[:8]))
    with pytest.raises(ContextMisuse, match=r"n_samples=\.\.\.\): the samples in this micro-batch, an int >= 1; "
                                            r"got 0"):
        ctx2 = ctx_for(epochs=1)
        model2, _ = ctx2.prepare(user_fits.MLP())
        for _ in ctx2.epochs():
            ctx2.backward(model2(user_fits.X[:8]).sum(), n_samples=0)
    ctx3 = ctx_for(epochs=1, lr_schedule="cosine")
    model3, _ = ctx3.prepare(user_fits.MLP())
    with pytest.raises(ContextMisuse, match=r"lr_schedule cosine needs the steps per epoch: .*"
                                            r"ctx\.epochs\(steps_per_epoch=\.\.\.\)"):
        for _ in ctx3.epochs():
            _own_batches(ctx3, model3, 1)
    with pytest.raises(ContextMisuse, match=r"steps_per_epoch=\.\.\.\): the ctx\.backward calls of one epoch"):
        next(iter(ctx_for().epochs(steps_per_epoch=0)))


# ---------------------------------------------------------------- the stop rules, for user trials


def test_user_trial_pruned_in_single_objective_study(tmp_path: Path) -> None:
    cfg = user(tmp_path, "fit_sleepy", objectives=["val_accuracy"], train={"epochs": 3, "user.lr_scale": 1e-4},
               pruning={"pruner": "threshold", "pruner_args": {"lower": 0.99}}, study={"n_trials": 1})
    t = autotune.run(cfg).study.trials[0]
    assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "pruned"
    assert len(t.intermediate_values) == 1  # trial.report ran each epoch; stopped after the first


def test_user_trial_pruned_in_two_objective_study(tmp_path: Path) -> None:
    space = {"user.sleep_ms": {"type": "categorical", "choices": [0, 20]},
             "user.lr_scale": {"type": "categorical", "choices": [1.0, 1e-4]}}
    cfg = user(tmp_path, "fit_sleepy", space=space, train={"epochs": 4}, study={"n_trials": 4},
               pruning={"pruner": "pareto", "pruner_args": {"n_startup_trials": 2, "n_warmup_steps": 1}})
    study = open_study(cfg)
    for _ in range(3):
        study.enqueue_trial({"user.sleep_ms": 0, "user.lr_scale": 1.0})
    study.enqueue_trial({"user.sleep_ms": 20, "user.lr_scale": 1e-4})  # slower and not learning: dominated
    res = autotune.run(cfg)
    bad = res.study.trials[3]
    assert bad.state.name == "PRUNED" and bad.user_attrs["stop_reason"] == "dominated", bad.user_attrs
    assert bad.user_attrs["stop_epoch"] < 4


def test_divergence_and_hang_stop_user_trials(tmp_path: Path) -> None:
    cfg = user(tmp_path, "fit_sleepy", train={"epochs": 3, "user.sleep_ms": 100}, study={"n_trials": 1},
               pruning={"slow": {"hang_seconds": 0.5}})
    t = autotune.run(cfg).study.trials[0]
    assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "hang"
    assert "hang_seconds" in t.user_attrs["stop_detail"]
    ctx = TrialContext(TrainingPlan.bare({**DEFAULTS, "device": "cpu", "epochs": 3},
                                         limits=stops.Limits(loss_factor=4.0)))
    model, _ = ctx.prepare(torch.nn.Linear(1, 1))
    with pytest.raises(TrialStopped, match="diverged"):
        for i in ctx.epochs():
            ctx.report(train_loss=1.0 if i == 1 else 10.0)  # a reported loss drives the rule too


def test_early_stopping_watches_val_loss_or_the_objective() -> None:
    ctx = TrialContext(TrainingPlan.bare({**DEFAULTS, "device": "cpu", "epochs": 10, "early_stopping_patience": 2},
                                         early_stopping_on=(("val_loss", "minimize"), ("val_f1", "maximize"))))
    seen = []
    for e in ctx.epochs():
        seen.append(e)
        ctx.report(val_f1=[0.5, 0.6, 0.6, 0.55, 0.9, 0.9][e - 1])  # no val_loss: val_f1, maximized, is watched
    assert seen == [1, 2, 3, 4] and ctx._state.stopped_early_at == 4


def test_oom_retry_runs_after_the_failed_attempt_is_freed(tmp_path: Path) -> None:
    user_fits.OOM_MODELS.clear()
    user_fits.OOM_SEEN.clear()
    cfg = user(tmp_path, "fit_oom_above_32", pruning={"oom": "retry_smaller_batch"}, study={"n_trials": 1},
               train={"batch_size": 64, "eval_batch_size": 500})
    t = autotune.run(cfg).study.trials[0]
    assert t.state.name == "COMPLETE" and t.user_attrs["oom_retried"] and t.user_attrs["batch_size_used"] == 32
    first, retry = user_fits.OOM_SEEN
    assert first["batch_size"] == 64 and retry["batch_size"] == 32
    assert retry["eval_batch_size"] == 250  # evaluation batches halve too
    assert retry["earlier_models_alive"] == [False]  # the failed attempt's model was gone before the retry


# ---------------------------------------------------------------- errors in user code, misuse of the context


def test_raising_user_function_fails_its_trial_with_file_and_line(tmp_path: Path) -> None:
    space = {"user.flaky": {"type": "bool"}}
    cfg = user(tmp_path, "fit_raises_on_odd_trials", space=space, study={"n_trials": 3}, train={"epochs": 1})
    study = open_study(cfg)
    for flaky in (True, False, False):
        study.enqueue_trial({"user.flaky": flaky})
    res = autotune.run(cfg)
    states = [t.state.name for t in res.study.trials]
    assert states[:3] == ["FAIL", "COMPLETE", "COMPLETE"]  # the study went on after the failure
    err = res.study.trials[0].user_attrs["error"]
    line = next(i for i, s in enumerate(Path(user_fits.__file__).read_text().splitlines(), 1) if "flaky data" in s)
    assert err == f"ValueError: flaky data shard (at user_fits.py:{line} in fit_raises_on_odd_trials)"


def test_repeated_error_stops_the_run_with_one_line(tmp_path: Path) -> None:
    ok = user(tmp_path, study={"n_trials": 1}, train={"epochs": 1})
    autotune.run(ok)  # one completed trial first: it must survive
    src = tmp_path / "broken.yaml"
    src.write_text(f"study: {{name: u, storage: 'sqlite:///{tmp_path}/u.db', n_trials: 10}}\n"
                   "trainer: tests.user_fits:fit_raises\ntrain: {epochs: 1}\n")
    proc = subprocess.run([sys.executable, "-m", "autotune", "run", str(src), "--plain"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    line = next(i for i, s in enumerate(Path(user_fits.__file__).read_text().splitlines(), 1) if '["depth"]' in s)
    assert errors == [f"error: tests.user_fits:fit_raises: 3 trials in a row failed with KeyError: 'depth' (at "
                      f"user_fits.py:{line} in fit_raises); stopped the run (finished trials are kept)"]
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    study = optuna.load_study(study_name="u", storage=f"sqlite:///{tmp_path}/u.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL", "FAIL", "FAIL"]


@pytest.mark.parametrize("fit,message", [
    ("fit_reports_clock", r"train_time_s is measured by autotune"),
    ("fit_reports_twice", r"ctx\.report called twice in epoch 1"),
    ("fit_backward_before_prepare", r"ctx\.backward before ctx\.prepare"),
    ("fit_no_epochs", r"returned without an epoch"),
])
def test_misuse_of_the_context_is_a_clear_message(tmp_path: Path, fit: str, message: str) -> None:
    with pytest.raises(ContextMisuse, match=message):
        autotune.train(user(tmp_path, fit, train={"epochs": 3}))


def test_a_fit_that_never_reports_is_told_so(tmp_path: Path) -> None:
    r = autotune.train(user(tmp_path, "fit_never_reports", train={"epochs": 2}))  # each epoch: its clocks
    assert [h.epoch for h in r.history] == [1, 2] and all(h.samples_per_s > 0 and not h.metrics for h in r.history)
    t = autotune.run(user(tmp_path, "fit_never_reports", study={"n_trials": 1})).study.trials[0]
    assert t.state.name == "FAIL"
    assert t.user_attrs["error"].startswith(
        "ContextMisuse: tests.user_fits:fit_never_reports never called ctx.report(...) with a metric in its 2 epoch(s) "
        "and returned no val_accuracy: report the objectives (val_accuracy) once per epoch, inside `for epoch in "
        "ctx.epochs()`: ctx.report(val_accuracy=...)"), t.user_attrs["error"]
    with pytest.raises(ContextMisuse, match=r"ctx\.report outside `for epoch in ctx\.epochs\(\)`: report each "
                                            r"epoch's metrics inside the loop"):
        ctx_for().report(val_loss=1.0)


def test_an_unknown_metric_is_offered_only_what_the_study_takes(tmp_path: Path) -> None:
    cfg = user(tmp_path, "fit_reports_unknown", objectives=[{"metric": "val_bpb", "direction": "minimize"},
                                                            "train_time_s"],
               metrics=["tokens_seen"], train={"epochs": 1})
    # (a ConfigError, as the integrations' first evaluation: the code reports the same names in every trial)
    with pytest.raises(ConfigError, match=r"user\.yaml: objectives\.0\.metric: ctx\.report\(val_f2=\.\.\.\) at "
                                          r"user_fits\.py:\d+ in fit_reports_unknown: 'val_f2' is not an objective or "
                                          r"a declared metric \(did you mean 'val_bpb'\?\); allowed: tokens_seen, "
                                          r"train_loss, val_bpb, val_loss$"):
        autotune.train(cfg)  # neither the clocks nor the built-in trainer's metrics (val_accuracy, val_mae...)
    with pytest.raises(ConfigError, match=r"user\.yaml: metrics: ctx\.report\(val_f2=\.\.\.\) at user_fits\.py:\d+ "
                                          r"in fit_reports_unknown: 'val_f2' is not an objective or a declared metric; "
                                          r"allowed: train_loss, val_accuracy, val_loss \(a metric of your own: "
                                          r"declare it under `metrics:` in the YAML\)$"):
        autotune.train(user(tmp_path, "fit_reports_unknown", train={"epochs": 3}))


def test_catching_a_stop_still_stops_the_trial(tmp_path: Path, quiet_cores: None) -> None:
    cfg = user(tmp_path, "fit_catches_stop", train={"epochs": 3}, study={"n_trials": 1},
               pruning={"slow": {"max_trial_seconds": 1e-6}})
    t = autotune.run(cfg).study.trials[0]
    # (the speed probe's projection, measured as the first epoch's data ran out, is the stop caught here)
    assert t.state.name == "FAIL" and "ctx.backward after the trial was stopped (slow at epoch 0" in \
        t.user_attrs["error"]


@pytest.mark.parametrize("raw,key,message", [
    ({"trainer": "tests.no_such_module:fit"}, "trainer", r"cannot import 'tests\.no_such_module'"),
    ({"trainer": "tests.user_fits:not_a_fit"}, "trainer",
     r"tests\.user_fits:not_a_fit must take the trial context as its one argument, fit\(ctx\); it takes "
     r"\(ctx, other\)"),
    ({"trainer": "tests.user_fits:fit", "objectives": [{"metric": "val_f1"}]}, r"objectives\.0\.direction",
     r"val_f1 is not a built-in metric"),
    ({"objectives": [{"metric": "val_f1", "direction": "maximize"}]}, r"objectives\.0\.metric",
     r"unknown metric 'val_f1'"),
    ({"space": {"user.width": {"type": "categorical", "choices": [8]}}}, r"space\.user\.width",
     r"user parameters go to a training function"),
    ({"trainer": "tests.user_fits:fit", "train": {"user.lr": 0.1}}, r"train\.user\.lr", r"'lr' is a trainer setting"),
    ({"trainer": "tests.user_fits:fit", "train": {"quantize": "dynamic_int8"}}, r"train\.quantize",
     r"quantize: compression and transfer learning run on the built-in trainer's model"),
    ({"trainer": "tests.user_fits:fit", "metrics": ["train_time_s"]}, r"metrics\.0",
     r"'train_time_s': a metric name is a Python identifier and not one of the clocks"),
])
def test_user_training_config_errors(raw: dict, key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"{key}: {message}"):
        config.from_dict(raw, source="user.yaml")


def test_trainer_that_cannot_be_imported_fails_validate(tmp_path: Path) -> None:
    src = tmp_path / "bad.yaml"
    src.write_text("trainer: my_missing_pkg.fit:fit\n")
    proc = subprocess.run([sys.executable, "-m", "autotune", "validate", str(src)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: bad.yaml: trainer: cannot import 'my_missing_pkg.fit': "
                                                "ModuleNotFoundError: No module named 'my_missing_pkg'"]


def test_run_takes_a_function_from_python(tmp_path: Path) -> None:
    cfg = user(tmp_path, study={"n_trials": 1}, train={"epochs": 1})
    calls = []

    def my_fit(ctx: TrialContext) -> None:
        calls.append(ctx.params["lr"])
        user_fits.fit(ctx)

    res = autotune.run(cfg, my_fit)
    assert calls == [2e-2] and res.study.trials[0].state.name == "COMPLETE"
    r = autotune.train(cfg, params={"lr": 1e-2}, fit=my_fit)
    assert calls[-1] == 1e-2 and r.val_accuracy > 0.5


def test_a_broken_device_stops_the_run_at_once(tmp_path: Path) -> None:
    cfg = user(tmp_path, "fit_illegal_address", study={"n_trials": 5}, train={"epochs": 1})
    with pytest.raises(autotune.AutotuneError, match=r"illegal memory access.*the device cannot be used by this "
                                                     r"process any more"):
        autotune.run(cfg)
    trials = optuna.load_study(study_name="u", storage=cfg.study.storage).trials
    assert [t.state.name for t in trials] == ["FAIL"] and "illegal memory access" in trials[0].user_attrs["error"]


# ---------------------------------------------------------------- lr_schedule and the fit's own parameter groups


def _group_lrs(ctx: TrialContext, opt: torch.optim.Optimizer, model: torch.nn.Module) -> list[list[float]]:
    """The lr of each group at every optimizer step of the run (what each step used)."""
    seen: list[list[float]] = []
    opt.register_step_pre_hook(lambda o, args, kwargs: seen.append([float(g["lr"]) for g in o.param_groups]))
    train = ctx.loader((user_fits.X, user_fits.Y))
    for _ in ctx.epochs():
        for x, y in train:
            ctx.backward(torch.nn.functional.cross_entropy(model(x), y))
        ctx.report()
    return seen


@pytest.mark.parametrize("schedule", ["cosine", "onecycle"])
def test_a_schedule_scales_each_groups_own_lr_times_the_searched_lr(schedule: str) -> None:
    ctx = TrialContext(TrainingPlan.bare({"device": "cpu", "lr": 0.5, "lr_schedule": schedule, "epochs": 2,
                                          "batch_size": 100}, searched=("lr", "lr_schedule")))
    net = user_fits.MLP()
    model, opt = ctx.prepare(net, torch.optim.SGD(user_fits.two_groups(net, 0.1, 6.4)))
    seen = _group_lrs(ctx, opt, model)
    assert len(seen) == 12 and all(b == pytest.approx(64 * w) for w, b in seen)  # the groups' ratio holds
    if schedule == "cosine":
        assert seen[0] == pytest.approx([0.05, 3.2]) and seen[-1][0] < seen[0][0]
    else:  # warms up to each group's own max, then anneals
        assert [g["max_lr"] for g in opt.param_groups] == pytest.approx([0.05, 3.2])
        peak = max(range(len(seen)), key=lambda i: seen[i][0])  # (12 steps: the peak step is near the max)
        assert seen[peak] == pytest.approx([0.05, 3.2], rel=0.01) and 0 < peak < len(seen) - 1 and seen[0][0] < 0.01
    assert ctx._state.unapplied() == {}


def test_without_a_searched_lr_the_groups_keep_their_own() -> None:
    ctx = TrialContext(TrainingPlan.bare({"device": "cpu", "lr_schedule": "cosine", "epochs": 1, "batch_size": 100},
                                         searched=("lr_schedule",)))
    net = user_fits.MLP()
    model, opt = ctx.prepare(net, torch.optim.SGD(user_fits.two_groups(net, 0.1, 6.4)))
    assert _group_lrs(ctx, opt, model)[0] == pytest.approx([0.1, 6.4])  # the default lr is no multiplier


def test_an_optimizer_built_with_the_searched_lr_is_not_scaled_by_it_again() -> None:
    ctx = TrialContext(TrainingPlan.bare({"device": "cpu", "lr": 0.5, "epochs": 1, "batch_size": 100},
                                         searched=("lr",)))
    net = user_fits.MLP()
    model, opt = ctx.prepare(net, torch.optim.Adadelta(net.parameters(), lr=ctx.settings.lr))  # mnist's shape
    assert [g["lr"] for g in opt.param_groups] == [0.5]
    _group_lrs(ctx, opt, model)  # applied once the optimizer built with it steps
    assert "lr" not in ctx._state.unapplied()


def test_the_builtin_optimizers_onecycle_peaks_at_the_searched_lr() -> None:
    ctx = TrialContext(TrainingPlan.bare({"device": "cpu", "lr": 0.5, "optimizer": "sgd", "lr_schedule": "onecycle",
                                          "epochs": 2, "batch_size": 100}, searched=("lr", "lr_schedule", "optimizer")))
    model, opt = ctx.prepare(user_fits.MLP())
    assert max(lrs[0] for lrs in _group_lrs(ctx, opt, model)) == pytest.approx(0.5, rel=0.01)
    assert opt.param_groups[0]["max_lr"] == pytest.approx(0.5)


def test_the_fits_own_scheduler_steps_alone() -> None:
    ctx = TrialContext(TrainingPlan.bare({"device": "cpu", "lr": 0.5, "lr_schedule": "cosine", "epochs": 1,
                                          "batch_size": 100}, searched=("lr", "lr_schedule")))
    net = user_fits.MLP()
    model, opt = ctx.prepare(net, torch.optim.SGD(user_fits.two_groups(net, 0.1, 6.4)))
    torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)  # never stepped: the lr stays
    assert _group_lrs(ctx, opt, model)[-1] == pytest.approx([0.05, 3.2])  # no cosine stacked on top
    assert "own learning-rate scheduler" in ctx._state.unapplied()["lr_schedule"]


def test_a_scheduler_built_before_prepare_cannot_take_a_searched_lr() -> None:
    ctx = TrialContext(TrainingPlan.bare({"device": "cpu", "lr": 0.5}, searched=("lr",)))
    net = user_fits.MLP()
    opt = torch.optim.SGD(user_fits.two_groups(net, 0.1, 6.4))
    torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    with pytest.raises(ContextMisuse, match=r"build your scheduler after ctx\.prepare\(model, optimizer\)"):
        ctx.prepare(net, opt)


def test_onecycle_keeps_the_searched_momentum_and_takes_optimizers_without_one() -> None:
    """OneCycleLR cycles momentum by default: it would overwrite a searched momentum, and raise on Adadelta."""
    ctx = TrialContext(TrainingPlan.bare({"device": "cpu", "lr": 0.5, "optimizer": "sgd", "momentum": 0.7,
                                          "lr_schedule": "onecycle", "epochs": 1, "batch_size": 100},
                                         searched=("lr", "momentum", "lr_schedule", "optimizer")))
    model, opt = ctx.prepare(user_fits.MLP())
    _group_lrs(ctx, opt, model)
    assert opt.param_groups[0]["momentum"] == 0.7
    ctx = TrialContext(TrainingPlan.bare({"device": "cpu", "lr": 0.5, "lr_schedule": "onecycle", "epochs": 1,
                                          "batch_size": 100}, searched=("lr", "lr_schedule")))
    net = user_fits.MLP()
    model, opt = ctx.prepare(net, torch.optim.Adadelta(net.parameters(), lr=1.0))  # mnist's optimizer
    assert max(lrs[0] for lrs in _group_lrs(ctx, opt, model)) == pytest.approx(0.5, rel=0.01)


def test_the_epoch_early_stopping_ends_is_not_pruned_over_epochs_it_will_not_run() -> None:
    """Early stopping ends the training at epoch 4 of 10: a study rule judging that epoch (a projection to 10
    epochs, a front) must not discard it; before that epoch the rule still stops the trial."""
    def run(stop_at: int) -> TrialContext:
        def rule(rec: Any) -> None:
            if rec.epoch == stop_at:
                raise TrialStopped("dominated", rec.epoch, "behind the front")

        ctx = TrialContext(TrainingPlan.bare({**DEFAULTS, "device": "cpu", "epochs": 10, "early_stopping_patience": 2}),
                           on_epoch=rule)
        with pytest.raises(TrialStopped) if stop_at < 4 else contextlib.nullcontext():
            for e in ctx.epochs():
                ctx.report(val_loss=[1.0, 0.9, 0.95, 0.97][e - 1])
        return ctx

    done = run(4)
    assert done._state.stopped_early_at == 4 and done._state.stop is None and len(done._state.history) == 4
    stopped = run(3)
    st = stopped._state
    assert st.stop is not None and st.stop.reason == "dominated" and st.stopped_early_at is None


def test_a_loop_that_steps_its_own_optimizer_counts_the_batches_it_took() -> None:
    ctx = TrialContext({**DEFAULTS, "device": "cpu", "epochs": 1, "batch_size": 50})
    model, opt = ctx.prepare(user_fits.MLP())
    for _ in ctx.epochs():
        for x, y in ctx.loader((user_fits.X, user_fits.Y)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        ctx.report(val_loss=1.0)
    h = ctx._state.history[0]
    assert h.samples_per_s * h.epoch_time_s == pytest.approx(len(user_fits.X), rel=1e-6)


def test_a_fit_that_sets_the_group_lrs_itself_did_not_apply_the_searched_lr() -> None:
    """nanoGPT sets `group['lr'] = get_lr(it)` every step: a searched lr (and lr_schedule) it overwrites is not
    applied, whether the context scaled its optimizer or stepped a schedule on it; a torch scheduler of its own
    moving the lrs is not such an overwrite."""
    def run(own_lr: bool, own_scheduler: bool) -> dict[str, str]:
        ctx = TrialContext(TrainingPlan.bare({"device": "cpu", "lr": 0.5, "lr_schedule": "cosine", "epochs": 1,
                                              "batch_size": 100}, searched=("lr", "lr_schedule")))
        net = user_fits.MLP()
        model, opt = ctx.prepare(net, torch.optim.SGD(user_fits.two_groups(net, 0.1, 6.4)))
        if own_scheduler:
            torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.1)  # moves the lrs at once: its own schedule
        for _ in ctx.epochs():
            for i, (x, y) in enumerate(ctx.loader((user_fits.X, user_fits.Y))):
                if own_lr:
                    for g in opt.param_groups:
                        g["lr"] = 0.01 * (i + 1)
                ctx.backward(torch.nn.functional.cross_entropy(model(x), y))
            ctx.report(val_loss=1.0)
        return ctx._state.unapplied()

    overwritten = run(own_lr=True, own_scheduler=False)
    assert "sets the optimizer's group lrs itself" in overwritten["lr"] and "lr_schedule" in overwritten
    assert "lr" not in run(own_lr=False, own_scheduler=False)
    assert "lr" not in run(own_lr=False, own_scheduler=True)


def test_evaluation_at_the_top_of_an_epoch_is_not_training() -> None:
    """A loop that evaluates first, then trains (`for epoch: evaluate(); train()`): the clock starts at the
    epoch's first training batch."""
    import time

    ctx = TrialContext({**DEFAULTS, "device": "cpu", "epochs": 2, "batch_size": 100})
    model, _ = ctx.prepare(user_fits.MLP())
    train = ctx.loader((user_fits.X, user_fits.Y))
    for _ in ctx.epochs():
        time.sleep(0.3)  # evaluating the model before this epoch's training
        for x, y in train:
            ctx.backward(torch.nn.functional.cross_entropy(model(x), y))
        ctx.report(val_loss=1.0)
    assert all(h.epoch_time_s < 0.25 for h in ctx._state.history), [h.epoch_time_s for h in ctx._state.history]
