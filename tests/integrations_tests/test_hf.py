"""The Hugging Face integration (autotune.integrations.hf): every catalogue setting mapped onto the Trainer's
arguments or said not to apply, each mapped value really reaching the Trainer that trains, the clocks, the
stops (one objective and several), the front, `best --export`, and a missing extra said in one line."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import autotune  # noqa: E402
from autotune.cli import main  # noqa: E402
from autotune.core import ConfigError  # noqa: E402
from autotune.integrations import (  # noqa: E402
    BY_CONTEXT,
    check_table,
    hf,  # noqa: E402
    require,
)
from autotune.spec.settings import DEFAULTS  # noqa: E402
from autotune.study.runner import open_study  # noqa: E402
from autotune.training import TrialContext, TrialSetup, run_fit, trial_session  # noqa: E402
from examples import hf_text  # noqa: E402
from tests.conftest import ROOT  # noqa: E402

EXAMPLE = ROOT / "examples" / "hf_text.yaml"


def test_the_table_covers_the_settings_catalogue_once() -> None:
    assert check_table(hf.MAPPED, {**hf.NOT_APPLICABLE, **hf.YOURS}) == []
    assert check_table({**hf.MAPPED, "nope": None}, hf.NOT_APPLICABLE) == ["aug_crop_padding", "aug_cutout",
                                                                           "aug_flip", "data_fraction", "dropout",
                                                                           "init", "nope"]


def test_the_how_to_page_names_every_row() -> None:
    page = (ROOT / "docs" / "howto" / "hf.md").read_text(encoding="utf-8")
    for key in [*hf.MAPPED, *hf.YOURS, *hf.NOT_APPLICABLE, *BY_CONTEXT]:
        assert f"`{key}`" in page, key


# setting -> (a value other than its default, the TrainingArguments it must become)
ROWS: dict[str, tuple[Any, dict[str, Any]]] = {
    "lr": (0.05, {"learning_rate": 0.05}),
    "optimizer": ("sgd", {}),  # (the optimizer autotune builds: checked by the trial below)
    "momentum": (0.8, {}),
    "weight_decay": (0.01, {"weight_decay": 0.01}),
    "batch_size": (32, {"per_device_train_batch_size": 32}),
    "epochs": (2, {"num_train_epochs": 2.0}),
    "lr_schedule": ("cosine", {"lr_scheduler_type": "cosine"}),
    "label_smoothing": (0.1, {"label_smoothing_factor": 0.1}),
    "grad_accum_steps": (2, {"gradient_accumulation_steps": 2}),
    "grad_clip": (1.0, {"max_grad_norm": 1.0}),
    "precision": ("bf16", {"bf16": True, "fp16": False}),
    "compile": (True, {"torch_compile": True}),
    "compile_mode": ("max-autotune", {"torch_compile_mode": "max-autotune"}),
    "num_workers": (2, {"dataloader_num_workers": 2}),
    "pin_memory": (True, {"dataloader_pin_memory": True}),
    "prefetch_factor": (4, {"dataloader_prefetch_factor": 4}),
    "persistent_workers": (True, {"dataloader_persistent_workers": True}),
    "eval_batch_size": (64, {"per_device_eval_batch_size": 64}),
}


@pytest.mark.parametrize("key", sorted(hf.MAPPED))
def test_each_mapped_setting_becomes_its_training_argument(key: str, tmp_path: Path) -> None:
    value, expected = ROWS[key]
    extra = {"compile": True} if key == "compile_mode" else {"num_workers": 1} if key in (
        "prefetch_factor", "persistent_workers") else {}
    ctx = TrialContext({**DEFAULTS, "device": "cpu", **extra, key: value})
    args, wanted = hf.training_arguments(ctx, {"output_dir": str(tmp_path)})
    assert wanted[key] == expected
    held = {arg: getattr(args, arg) for arg in expected}
    assert held == ({"dataloader_pin_memory": False} if key == "pin_memory" else expected)  # (off on a CPU)


def test_loader_options_without_workers_are_off_and_said_not_applied(tmp_path: Path) -> None:
    ctx = TrialContext({**DEFAULTS, "device": "cpu", "persistent_workers": True, "prefetch_factor": 4})
    args, _ = hf.training_arguments(ctx, {"output_dir": str(tmp_path), "save_strategy": "steps"})
    assert (args.dataloader_persistent_workers, args.dataloader_prefetch_factor) == (False, None)
    assert (args.eval_strategy, args.logging_strategy, args.save_strategy) == ("epoch", "epoch", "epoch")


class Seen:
    """What the Trainer really did: its optimizer, the forward pass's dtype, the clip calls."""

    trainer: Any = None
    dtypes: set[torch.dtype] = set()
    clips: list[float] = []


def _make_trainer(args: Any, ctx: TrialContext) -> Any:
    trainer = hf_text.make_trainer(args, ctx)
    Seen.trainer, Seen.dtypes, Seen.clips = trainer, set(), []
    layer = trainer.model.bert.encoder.layer[0].output.dense
    layer.register_forward_hook(lambda m, i, out: Seen.dtypes.add(out.dtype) if m.training else None)
    clip = trainer.accelerator.clip_grad_norm_

    def counted(params: Any, max_norm: float, *a: Any, **k: Any) -> Any:
        Seen.clips.append(max_norm)
        return clip(params, max_norm, *a, **k)

    trainer.accelerator.clip_grad_norm_ = counted
    return trainer


def _trial(tmp_path: Path, searched: dict[str, Any], **fixed: Any) -> Any:
    settings = {**DEFAULTS, "device": "cpu", "epochs": 2, **fixed, **searched}
    ctx = TrialContext(settings, user_params={"hidden": 16}, seed=3,
                       setup=TrialSetup(metrics=["val_accuracy", "val_loss"], searched=list(searched)))
    with trial_session(settings):
        return run_fit(hf.trainer_fit(_make_trainer, output_dir=str(tmp_path)), ctx)


def test_a_trial_trains_the_trainer_with_every_mapped_value(tmp_path: Path) -> None:
    searched = {"optimizer": "sgd_nesterov", "lr": 0.05, "momentum": 0.8, "weight_decay": 0.01, "batch_size": 32,
                "grad_accum_steps": 2, "grad_clip": 0.5, "lr_schedule": "cosine", "label_smoothing": 0.1,
                "precision": "bf16", "eval_batch_size": 64, "dropout": 0.1, "channels_last": True,
                "data_fraction": 0.5}
    res = _trial(tmp_path, searched)
    trainer = Seen.trainer
    args = trainer.args
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.per_device_eval_batch_size,
            args.bf16, args.lr_scheduler_type.value, args.label_smoothing_factor) == (32, 2, 64, True, "cosine", 0.1)
    opt = trainer.optimizer.optimizer  # (accelerate's wrapper around the optimizer that stepped)
    assert type(opt) is torch.optim.SGD and opt.defaults["nesterov"] and opt.defaults["momentum"] == 0.8
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]  # the Trainer's groups: no decay on biases
    assert all("momentum_buffer" in opt.state[p] for p in opt.param_groups[0]["params"])  # it stepped
    assert opt.defaults["lr"] == 0.05 and 0.03 < res.history[0].lr < 0.05  # epoch 1 trained on the cosine's top
    assert opt.param_groups[0]["lr"] < 0.05 * 0.01  # the cosine schedule ran to its end
    assert trainer.get_eval_dataloader().total_batch_size == 64
    assert trainer.label_smoother.epsilon == 0.1
    assert Seen.dtypes == {torch.bfloat16}  # the forward pass ran under bf16 autocast
    assert Seen.clips and set(Seen.clips) == {0.5}
    assert trainer.model.config.hidden_dropout_prob == 0.1  # read by make_trainer from ctx.settings
    steps_per_epoch = math.ceil(len(hf_text.TRAIN) / 32 / 2)
    assert trainer.state.global_step == 2 * steps_per_epoch
    # what applied, and what could not
    assert set(res.not_applied) == {"channels_last", "data_fraction"}, res.not_applied
    assert "channels_last" in res.not_applied["channels_last"] and "data_fraction" in res.not_applied["data_fraction"]
    # the records: one per epoch, the Trainer's evaluation as val_*, its logged loss, the samples trained on
    assert [r.epoch for r in res.history] == [1, 2]
    assert all({"val_accuracy", "val_loss"} <= set(r.metrics) and math.isfinite(r.train_loss) for r in res.history)
    logged = [h for h in trainer.state.log_history if "eval_accuracy" in h]
    assert [r.metrics["val_accuracy"] for r in res.history] == [h["eval_accuracy"] for h in logged]
    assert res.model_params == sum(p.numel() for p in trainer.model.parameters())
    # the clocks: training only, evaluation and the Trainer's start-up left out
    runtime = next(h["train_runtime"] for h in trainer.state.log_history if "train_runtime" in h)
    evaluating = sum(h["eval_runtime"] for h in logged)
    assert 0 < res.train_time_s < runtime - evaluating
    assert res.history[-1].samples_per_s == pytest.approx(len(hf_text.TRAIN) / res.history[-1].epoch_time_s)


def test_an_optimizer_of_the_users_own_keeps_it_and_says_the_searched_one_was_not_used(tmp_path: Path) -> None:
    def own(args: Any, ctx: TrialContext) -> Any:
        trainer = _make_trainer(args, ctx)
        trainer.optimizer_cls_and_kwargs = (torch.optim.Adagrad, {"lr": 0.01})
        return trainer

    settings = {**DEFAULTS, "device": "cpu", "epochs": 1, "optimizer": "sgd", "lr": 0.05}
    ctx = TrialContext(settings, user_params={"hidden": 16}, setup=TrialSetup(searched=["optimizer", "lr"]))
    with trial_session(settings):
        res = run_fit(hf.trainer_fit(own, output_dir=str(tmp_path)), ctx)
    assert type(Seen.trainer.optimizer.optimizer) is torch.optim.Adagrad
    assert res.not_applied == {"optimizer": "your Trainer was given its own optimizer",
                               "lr": "your Trainer was given its own optimizer"}


def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **overrides: Any) -> Path:
    """The example's YAML in tmp_path (its storage there, a blow-up lr among the choices), hf_text importable."""
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    monkeypatch.chdir(tmp_path)
    doc = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    doc["study"]["storage"] = f"sqlite:///{tmp_path}/hf.db"
    doc["train"]["epochs"] = 2
    doc["space"]["lr"] = {"type": "categorical", "choices": [0.005, 1.0e30]}  # 1e30: the weights overflow: NaN
    for key, value in overrides.items():
        doc[key] = value
    path = tmp_path / "hf_text.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _run(path: Path, first: list[dict]) -> autotune.TuneResult:
    cfg = autotune.load_config(str(path), overrides={"study.n_trials": len(first)})
    study = open_study(cfg)
    for params in first:
        study.enqueue_trial(params)
    return autotune.run(cfg)


SMALL = {"lr": 0.005, "optimizer": "adamw", "batch_size": 64, "grad_accum_steps": 1, "lr_schedule": "constant",
         "precision": "fp32", "dropout": 0.0, "user.hidden": 16}
BLOWS_UP = {**SMALL, "lr": 1.0e30}


def test_two_objectives_a_diverging_trial_pruned_the_front_and_the_export(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _config(tmp_path, monkeypatch)
    res = _run(path, [SMALL, BLOWS_UP])
    done, blew = res.study.trials
    assert done.state.name == "COMPLETE", done.user_attrs
    assert done.values[0] > 0.6 and done.values[1] == done.user_attrs["train_time_s"] > 0
    assert blew.state.name == "PRUNED" and blew.user_attrs["stop_reason"] == "diverged", blew.user_attrs
    assert [p.number for p in res.pareto] == [0] and res.best is not None and res.best.number == 0
    # best --export: the recommended trial's settings fixed; its one trial trains as it did
    assert main(["best", str(path), "--export", "best.yaml"]) == 0
    exported = yaml.safe_load((tmp_path / "best.yaml").read_text(encoding="utf-8"))
    assert exported["train"]["lr"] == 0.005 and exported["train"]["user.hidden"] == 16
    again = autotune.run(autotune.load_config(str(tmp_path / "best.yaml"))).study.trials[0]
    assert again.state.name == "COMPLETE"
    assert again.values[0] == done.values[0]
    assert again.user_attrs["val_loss"] == pytest.approx(done.user_attrs["val_loss"], rel=1e-4)


def test_one_objective_a_diverging_trial_is_pruned_with_its_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _config(tmp_path, monkeypatch, objectives=[{"metric": "val_accuracy", "direction": "maximize"}],
                   pruning={"pruner": "median"})
    res = _run(path, [BLOWS_UP])
    (blew,) = res.study.trials
    assert blew.state.name == "PRUNED" and blew.user_attrs["stop_reason"] == "diverged", blew.user_attrs
    assert blew.user_attrs["stop_epoch"] == 1


def test_several_devices_are_refused_at_validation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """devices > 1 (fixed or searched) with the Trainer: one line, exit 2, before any trial (no study made)."""
    path = _config(tmp_path, monkeypatch)
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["train"]["devices"] = 2
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: hf_text.yaml: train.devices: the Hugging Face integration trains a trial on one device; "
                   "allowed: 1 (got 2)"), err
    assert not (tmp_path / "hf.db").exists()
    del doc["train"]["devices"]
    doc["space"]["devices"] = {"type": "categorical", "choices": [1, 2]}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"space\.devices: the Hugging Face integration .* \(got 1, 2\)$"):
        autotune.load_config(str(path))
    # a fit passed to run() is checked too
    del doc["space"]["devices"]
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    cfg = autotune.load_config(str(path))
    with pytest.raises(ConfigError, match=r"train\.devices: the Hugging Face integration"):
        autotune.run(cfg.model_copy(update={"train": {**cfg.train, "devices": 2}}), hf_text.fit)


# ---------------------------------------------------------------- the study's pruners stop a Trainer's trial


def _ahead(multi: bool) -> Any:
    """A finished trial no real one can match (accuracy 1.0 after each of 2 epochs, in a microsecond): what the
    study's pruner compares the Trainer's trial with, so its stop is certain, whatever the machine's load."""
    from optuna.trial import create_trial

    from autotune.search.pruners import EPOCH_VALUES

    if multi:
        return create_trial(values=[1.0, 1e-6], user_attrs={EPOCH_VALUES: [[1.0, 1e-6], [1.0, 2e-6]]})
    return create_trial(value=1.0, intermediate_values={1: 1.0, 2: 1.0})


@pytest.mark.parametrize("multi", [True, False], ids=["pareto", "median"])
def test_the_studys_pruner_stops_a_trainers_trial(multi: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    """Two objectives, the Pareto pruner: the trial, dominated after its first epoch, ends PRUNED (dominated). One
    objective, Optuna's median pruner: below the median after its first epoch, PRUNED (pruned). Both raised out
    of trainer.train() at the first evaluation: one epoch of two recorded."""
    args = {"n_startup_trials": 1, "n_warmup_steps": 1 if multi else 0}
    sections: dict[str, Any] = {"pruning": {"pruner": "pareto" if multi else "median", "pruner_args": args}}
    if not multi:
        sections["objectives"] = [{"metric": "val_accuracy", "direction": "maximize"}]
    cfg = autotune.load_config(str(_config(tmp_path, monkeypatch, **sections)), overrides={"study.n_trials": 2})
    study = open_study(cfg)
    study.add_trial(_ahead(multi))
    study.enqueue_trial(SMALL)
    t = autotune.run(cfg).study.trials[1]
    assert t.state.name == "PRUNED", t.user_attrs
    assert t.user_attrs["stop_reason"] == ("dominated" if multi else "pruned"), t.user_attrs
    assert t.user_attrs["stop_epoch"] == 1 and len(t.user_attrs["history"]) == 1
    assert t.user_attrs["stop_detail"] == ("dominated at epoch 1 by trial 0" if multi else "Optuna pruner")


def test_require_names_the_extra() -> None:
    with pytest.raises(ConfigError, match=r"^<config>: trainer: the Hugging Face integration needs no_such_mod: "
                                          r"pip install 'autotune\[hf\]'$"):
        require("no_such_mod", "hf", "Hugging Face")


def test_a_missing_transformers_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "hf_text.py").write_text((EXAMPLE.parent / "hf_text.py").read_text(encoding="utf-8"))
    code = ("import sys; sys.modules['transformers'] = None; from autotune.cli import main; "
            "sys.exit(main(['validate', 's.yaml']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("error: s.yaml: trainer: cannot import 'hf_text': ") and \
        lines[0].endswith("pip install 'autotune[hf]'"), lines[0]


def test_early_stopping_ends_the_trainers_training_cleanly(tmp_path: Path) -> None:
    # (min_delta 10: no epoch improves val_loss by that much, so patience 1 stops after the second epoch)
    res = _trial(tmp_path, {"batch_size": 64}, epochs=4, early_stopping_patience=1, early_stopping_min_delta=10.0)
    assert res.stopped_early_at == 2 and [r.epoch for r in res.history] == [1, 2]
    assert Seen.trainer.state.epoch == 2.0  # the Trainer stopped there (should_training_stop), no error


def test_the_report_reads_an_hf_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _config(tmp_path, monkeypatch)
    res = _run(path, [SMALL])
    res.report(str(tmp_path / "r.html"))
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "val_accuracy" in html and "hf-text" in html


@pytest.mark.slow
def test_two_workers_share_the_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _config(tmp_path, monkeypatch)
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["study"].update(storage=f"journal:///{tmp_path}/hf.log", n_trials=2)
    doc["space"]["lr"] = {"type": "categorical", "choices": [0.005]}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    assert main(["run", str(path), "--workers", "2", "--plain"]) == 0
    study = open_study(autotune.load_config(str(path)))
    done = [t for t in study.trials if t.state.name == "COMPLETE"]  # (a surplus trial a worker raced for: PRUNED)
    assert len(done) == 2 and all(t.values[0] > 0.5 and t.user_attrs["worker"] for t in done)


def test_no_lr_multiplier_note_for_the_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Trainer always trains with autotune's optimizer: a searched lr is its learning rate, said nowhere else."""
    from autotune.fit import notes

    cfg = autotune.load_config(str(_config(tmp_path, monkeypatch)),
                               overrides={"space.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}})
    assert notes(cfg) == []


def test_arguments_the_trainer_does_not_hold_are_not_applied(tmp_path: Path) -> None:
    """A make_trainer that builds its own TrainingArguments: what autotune gave is read back from the Trainer."""
    from transformers import TrainingArguments

    def ignores(args: Any, ctx: TrialContext) -> Any:
        own = TrainingArguments(**{**args.to_dict(), "per_device_train_batch_size": 16, "lr_scheduler_type": "linear",
                                   "output_dir": str(tmp_path)})
        return _make_trainer(own, ctx)

    settings = {**DEFAULTS, "device": "cpu", "epochs": 1, "batch_size": 32, "lr_schedule": "onecycle",
                "grad_accum_steps": 2}
    ctx = TrialContext(settings, user_params={"hidden": 16},
                       setup=TrialSetup(searched=["batch_size", "lr_schedule", "grad_accum_steps"]))
    with trial_session(settings):
        res = run_fit(hf.trainer_fit(ignores, output_dir=str(tmp_path)), ctx)
    assert Seen.trainer.args.per_device_train_batch_size == 16
    assert res.not_applied["batch_size"].startswith(
        "the framework holds TrainingArguments.per_device_train_batch_size=16, not what autotune gave it")
    assert res.not_applied["lr_schedule"] == ("the Trainer has no onecycle schedule (lr_scheduler_type: constant, "
                                              "cosine)")
    assert "grad_accum_steps" not in res.not_applied


def test_the_dataloader_takes_the_worker_settings(tmp_path: Path) -> None:
    _trial(tmp_path, {"num_workers": 1, "prefetch_factor": 3, "persistent_workers": True}, epochs=1)
    loader = Seen.trainer.callback_handler.train_dataloader
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (1, 3, True)


@pytest.mark.slow
def test_compile_compiles_the_trainers_model(tmp_path: Path) -> None:
    res = _trial(tmp_path, {"compile": True}, epochs=1)
    assert Seen.trainer.args.torch_compile and res.compile_time_s > 0
