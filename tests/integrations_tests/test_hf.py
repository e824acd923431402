"""The Hugging Face integration (autotune.integrations.hf): the user's recipe is the baseline (each unchosen
TrainingArguments value stays the user's, and what it held is recorded), each chosen setting really reaches the
Trainer that trains, a plain run and the same settings through autotune agree, every trial trains a fresh model in
its own folder, what the Trainer cannot apply or report is refused at validation, the clocks, the stops (one
objective and several), the front, `best --export`, and a missing extra said in one line."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import autotune  # noqa: E402
from autotune import config  # noqa: E402
from autotune.cli import main  # noqa: E402
from autotune.core import ConfigError  # noqa: E402
from autotune.integrations import HF, hf, require  # noqa: E402
from autotune.integrations.tables import uncovered  # noqa: E402
from autotune.spec import SETTINGS  # noqa: E402
from autotune.spec.settings import DEFAULTS  # noqa: E402
from autotune.study.runner import open_study  # noqa: E402
from autotune.training import TrainingPlan, TrialContext, TrialPort, run_fit, trial_session  # noqa: E402
from examples import hf_text  # noqa: E402
from tests.integrations_tests import hf_scripts  # noqa: E402
from tests.support import ROOT  # noqa: E402

EXAMPLE = ROOT / "examples" / "hf_text.yaml"
SCRIPTS = "tests.integrations_tests.hf_scripts"


# ---------------------------------------------------------------- the table, derived from the catalogue


def test_every_setting_has_one_role_and_the_table_names_only_catalogue_settings() -> None:
    assert uncovered(HF) == []
    roles = {key: HF.role(key)[0] for key in SETTINGS}
    assert set(roles.values()) <= {"mapped", "context", "yours", "cannot", "builtin"}
    assert roles["lr"] == roles["precision"] == "mapped" and roles["dropout"] == roles["init"] == "yours"
    assert roles["channels_last"] == roles["data_on_device"] == "cannot" and roles["device"] == "context"
    assert roles["prune_method"] == roles["freeze"] == "builtin"


def test_the_how_to_page_table_is_generated_from_the_table() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("reference", ROOT / "docs" / "hooks" / "reference.py")
    reference = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(reference)
    page = reference.howto_page("howto/hf.md", (ROOT / "docs" / "howto" / "hf.md").read_text(encoding="utf-8"))
    for key in SETTINGS:
        assert f"`{key}`" in page, key
    assert HF.table() in page


# setting -> (a value other than its default, the TrainingArguments it must become)
ROWS: dict[str, tuple[Any, dict[str, Any]]] = {
    "lr": (0.05, {"learning_rate": 0.05}),
    "weight_decay": (0.01, {"weight_decay": 0.01}),
    "batch_size": (32, {"per_device_train_batch_size": 32}),
    "epochs": (2, {"num_train_epochs": 2.0, "max_steps": -1}),
    "lr_schedule": ("cosine", {"lr_scheduler_type": "cosine"}),
    "label_smoothing": (0.1, {"label_smoothing_factor": 0.1}),
    "grad_accum_steps": (2, {"gradient_accumulation_steps": 2}),
    "grad_clip": (0.5, {"max_grad_norm": 0.5}),
    "precision": ("bf16", {"bf16": True, "fp16": False}),
    "compile": (True, {"torch_compile": True}),
    "compile_mode": ("max-autotune", {"torch_compile_mode": "max-autotune"}),
    "num_workers": (2, {"dataloader_num_workers": 2}),
    "pin_memory": (True, {"dataloader_pin_memory": True}),
    "prefetch_factor": (4, {"dataloader_prefetch_factor": 4}),
    "persistent_workers": (True, {"dataloader_persistent_workers": True}),
    "eval_batch_size": (64, {"per_device_eval_batch_size": 64}),
}


def _port(chosen: dict[str, Any], **fixed: Any) -> TrialPort:
    settings = {**DEFAULTS, "device": "cpu", **fixed, **chosen}
    return TrialPort(TrialContext(TrainingPlan.bare(settings, seed=7, searched=list(chosen), fixed=list(fixed))))


@pytest.mark.parametrize("key", sorted(k for k, a in HF.mapped.items() if a.on == "args"))
def test_each_chosen_setting_becomes_its_training_argument_and_nothing_else_changes(key: str, tmp_path: Path) -> None:
    value, expected = ROWS[key]
    fixed = {"compile": True} if key == "compile_mode" else {"num_workers": 1} if key in (
        "prefetch_factor", "persistent_workers") else {}
    base = hf_scripts.user_args(str(tmp_path))
    args, wanted = hf.trial_arguments(_port({key: value}, **fixed), base)
    assert wanted[key] == expected
    held = {arg: getattr(args, arg) for arg in expected}
    on_cpu = {"dataloader_pin_memory": False} if key == "pin_memory" else expected  # (HF: no pinning on a CPU)
    assert {a: getattr(v, "value", v) for a, v in held.items()} == on_cpu
    ours = {"eval_strategy", "logging_strategy", "save_strategy", "seed", "output_dir", "use_cpu", "logging_dir"}
    changed = {f for f, v in args.to_dict().items() if v != base.to_dict()[f]} - ours
    allowed = set(expected) | {a for k in fixed for a in HF.mapped[k].to(fixed[k], base)}
    derived = {"torch_compile", "torch_compile_backend"} if key in ("compile", "compile_mode") else set()  # (HF's)
    assert changed <= allowed | derived, changed


def test_nothing_chosen_keeps_every_argument_of_the_users(tmp_path: Path) -> None:
    base = hf_scripts.user_args(str(tmp_path))
    args, wanted = hf.trial_arguments(_port({}), base)
    assert wanted == {}
    assert args.output_dir == str(tmp_path / "seed-7")  # each trial its own folder
    mine = {"eval_strategy", "logging_strategy", "save_strategy", "seed", "output_dir", "logging_dir", "use_cpu"}
    assert {f for f, v in args.to_dict().items() if v != base.to_dict()[f]} <= mine


def test_a_trial_never_pushes_to_the_hub(tmp_path: Path) -> None:
    """The guide's TrainingArguments push to the Hub at every save: each trial's checkpoints would go to one
    repository (named after the trial's output folder). Trials push nothing; the recipe is otherwise the user's."""
    base = hf_scripts.user_args(str(tmp_path), push_to_hub=True)
    args, _ = hf.trial_arguments(_port({}), base)
    assert base.push_to_hub and not args.push_to_hub


def test_the_users_warmup_stays_with_a_chosen_constant_schedule(tmp_path: Path) -> None:
    args, _ = hf.trial_arguments(_port({"lr_schedule": "constant"}), hf_scripts.user_args(str(tmp_path)))
    assert args.lr_scheduler_type.value == "constant_with_warmup" and args.warmup_steps == 0.1


def test_loader_options_without_workers_are_off_and_said_not_applied(tmp_path: Path) -> None:
    port = _port({"persistent_workers": True, "prefetch_factor": 4})
    args, _ = hf.trial_arguments(port, hf.TrainingArguments(output_dir=str(tmp_path), save_strategy="steps"),
                                 given={"output_dir", "save_strategy"})
    assert (args.dataloader_persistent_workers, args.dataloader_prefetch_factor) == (False, None)
    assert (args.eval_strategy, args.logging_strategy, args.save_strategy) == ("epoch", "epoch", "epoch")


# ---------------------------------------------------------------- trials: what the Trainer really did


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


def _trial(tmp_path: Path, searched: dict[str, Any], fit: Any = None, epochs: int | None = 2, **fixed: Any) -> Any:
    """One trial of `fit` on a bare context: `searched` and `fixed` its chosen settings (epochs fixed at 2 unless
    None: then the Trainer's own)."""
    fixed = {"epochs": epochs, **fixed} if epochs is not None else fixed
    settings = {**DEFAULTS, "device": "cpu", **fixed, **searched}
    ctx = TrialContext(TrainingPlan.bare(settings, user={"hidden": 16}, seed=3, metrics=["val_accuracy", "val_loss"],
                                         searched=list(searched), fixed=list(fixed)))
    with trial_session(settings):
        return run_fit(fit or hf.trainer_fit(_make_trainer, output_dir=str(tmp_path)), ctx)


def test_a_trial_trains_the_trainer_with_every_chosen_value(tmp_path: Path) -> None:
    searched = {"optimizer": "sgd_nesterov", "lr": 0.05, "momentum": 0.8, "weight_decay": 0.01, "batch_size": 32,
                "grad_accum_steps": 2, "grad_clip": 0.5, "lr_schedule": "cosine", "label_smoothing": 0.1,
                "precision": "bf16", "eval_batch_size": 64, "dropout": 0.1, "data_fraction": 0.5}
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
    assert set(res.not_applied) == {"data_fraction"}, res.not_applied  # (make_trainer never reads it)
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


def test_unchosen_settings_are_the_trainers_and_recorded_as_the_recipe(tmp_path: Path) -> None:
    """Only lr chosen: the Trainer's own AdamW, its linear schedule, 3 epochs (the user's num_train_epochs), eval
    batch 16, max_grad_norm 1.0; the record says so, and the stored settings leave them out."""
    fit = hf.trainer_fit(hf_scripts.make_fresh, output_dir=str(tmp_path), learning_rate=3e-3, num_train_epochs=2,
                         per_device_eval_batch_size=16, warmup_steps=0.1, use_cpu=True)
    res = _trial(tmp_path, {"lr": 0.004}, fit=fit, epochs=None)
    args, opt = hf_scripts.SEEN["args"], hf_scripts.SEEN["optimizer"]
    assert type(getattr(opt, "optimizer", opt)) is torch.optim.AdamW and args.learning_rate == 0.004
    assert (args.lr_scheduler_type.value, args.num_train_epochs, args.per_device_eval_batch_size,
            args.max_grad_norm, args.warmup_steps) == ("linear", 2.0, 16, 1.0, 0.1)
    assert res.epochs_run == 2  # the user's 2 epochs, not the catalogue's 10
    assert res.history[-1].epochs_planned == 2  # (what the study's own stop rules read: its pruners, vs_front)
    assert res.recipe["lr_schedule"] == "linear" and res.recipe["epochs"] == 2 and res.recipe["grad_clip"] == 1.0
    assert res.recipe["optimizer"].startswith("adamw_torch") and res.recipe["eval_batch_size"] == 16
    assert "lr" not in res.recipe and res.not_applied == {}
    for key in ("optimizer", "lr_schedule", "epochs", "grad_clip", "eval_batch_size", "weight_decay"):
        assert key in res.unused, key  # (the trial's stored settings leave out what it did not set)
    assert "lr" not in res.unused and "device" not in res.unused



def test_momentum_under_a_searched_adamw_says_why_it_was_not_applied(tmp_path: Path) -> None:
    """The Trainer stepped autotune's adamw, which takes no momentum: that is the reason given (it said that
    ctx.prepare was never called, as if no optimizer of autotune's had trained)."""
    res = _trial(tmp_path, {"optimizer": "adamw", "momentum": 0.8}, epochs=1)
    assert type(Seen.trainer.optimizer.optimizer) is torch.optim.AdamW
    assert res.not_applied == {"momentum": "optimizer adamw takes no momentum"}


def test_an_optimizer_of_the_users_own_keeps_it_and_says_the_searched_one_was_not_used(tmp_path: Path) -> None:
    def own(args: Any, ctx: TrialContext) -> Any:
        trainer = _make_trainer(args, ctx)
        trainer.optimizer_cls_and_kwargs = (torch.optim.Adagrad, {"lr": 0.01})
        return trainer

    res = _trial(tmp_path, {"optimizer": "sgd", "lr": 0.05}, fit=hf.trainer_fit(own, output_dir=str(tmp_path)),
                 epochs=1)
    assert type(Seen.trainer.optimizer.optimizer) is torch.optim.Adagrad
    assert res.not_applied == {"optimizer": "your Trainer was given its own optimizer",
                               "lr": "your Trainer was given its own optimizer"}


def test_arguments_the_trainer_does_not_hold_are_not_applied(tmp_path: Path) -> None:
    """A make_trainer that builds its own TrainingArguments: what autotune gave is read back from the Trainer."""
    from transformers import TrainingArguments

    def ignores(args: Any, ctx: TrialContext) -> Any:
        own = TrainingArguments(**{**args.to_dict(), "per_device_train_batch_size": 16, "lr_scheduler_type": "linear",
                                   "output_dir": str(tmp_path)})
        return _make_trainer(own, ctx)

    res = _trial(tmp_path, {"batch_size": 32, "lr_schedule": "cosine", "grad_accum_steps": 2},
                 fit=hf.trainer_fit(ignores, output_dir=str(tmp_path)), epochs=1)
    assert Seen.trainer.args.per_device_train_batch_size == 16
    assert res.not_applied["batch_size"].startswith(
        "the Trainer holds TrainingArguments.per_device_train_batch_size=16, not what autotune gave it")
    assert res.not_applied["lr_schedule"].startswith("the Trainer holds TrainingArguments.lr_scheduler_type='linear'")
    assert "grad_accum_steps" not in res.not_applied


def test_the_dataloader_takes_the_worker_settings(tmp_path: Path) -> None:
    _trial(tmp_path, {"num_workers": 1, "prefetch_factor": 3, "persistent_workers": True}, epochs=1)
    loader = Seen.trainer.callback_handler.train_dataloader
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (1, 3, True)


@pytest.mark.slow
def test_early_stopping_ends_the_trainers_training_cleanly(tmp_path: Path) -> None:
    # (min_delta 10: no epoch improves val_loss by that much, so patience 1 stops after the second epoch)
    res = _trial(tmp_path, {"batch_size": 64}, epochs=4, early_stopping_patience=1, early_stopping_min_delta=10.0)
    assert res.stopped_early_at == 2 and [r.epoch for r in res.history] == [1, 2]
    assert Seen.trainer.state.epoch == 2.0  # the Trainer stopped there (should_training_stop), no error


@pytest.mark.slow
def test_compile_compiles_the_trainers_model(tmp_path: Path) -> None:
    res = _trial(tmp_path, {"compile": True}, epochs=1)
    assert Seen.trainer.args.torch_compile and res.compile_time_s > 0


# ---------------------------------------------------------------- the user's recipe, end to end (held-out style)


def _scripts_config(tmp_path: Path, fit: str = "fit", **sections: Any) -> config.RunConfig:
    raw: dict[str, Any] = {
        "study": {"name": "hf-scripts", "storage": f"sqlite:///{tmp_path}/hf.db", "n_trials": 1},
        "trainer": f"{SCRIPTS}:{fit}",
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}, "train_time_s"],
        "train": {"device": "cpu"},
    }
    raw.update(sections)
    return config.from_dict(raw, source=str(tmp_path / "hf.yaml"))


def test_a_plain_run_and_the_same_settings_through_autotune_reach_the_same_accuracy(tmp_path: Path) -> None:
    """The script's own Trainer (AdamW at 3e-3, linear with warmup, 3 epochs...) trained plainly, and through
    `hf.trainer_fit(trainer)` with nothing searched and the trial's seed the script's (42): the same recipe, so the
    same accuracy (the issue's report: 0.97 plainly, 0.48 through autotune, when autotune's defaults replaced the
    recipe). bench/recipe_parity.py compares them over several seeds."""
    plain = hf_scripts.plain_accuracy(seed=42)
    res = autotune.run(_scripts_config(tmp_path, study={"name": "p", "storage": f"sqlite:///{tmp_path}/p.db",
                                                        "n_trials": 1, "trial_seed": 42}))
    (t,) = res.study.trials
    assert t.state.name == "COMPLETE", t.user_attrs
    tuned = t.values[0]
    print(f"\nplain HF {plain:.4f}, through autotune {tuned:.4f} (same TrainingArguments, seed 42)")
    assert plain > 0.85 and abs(plain - tuned) <= 0.02, (plain, tuned)
    assert len(t.user_attrs["history"]) == 3  # the user's 3 epochs
    recipe = t.user_attrs["recipe"]
    assert recipe["lr"] == 3e-3 and recipe["lr_schedule"] == "linear" and recipe["epochs"] == 3
    assert "lr" not in t.user_attrs["settings"] and "epochs" not in t.user_attrs["settings"]


def test_the_trainers_arguments_in_a_callback_are_the_users_for_every_unsearched_key(tmp_path: Path) -> None:
    cfg = _scripts_config(tmp_path, space={"lr": {"type": "categorical", "choices": [0.002]}},
                          train={"device": "cpu", "epochs": 1})
    autotune.run(cfg)
    held = hf_scripts.SEEN["args"].to_dict()
    user = hf_scripts.user_args().to_dict()
    # autotune's own, for its records: each epoch evaluated and logged, the trial's seed and folder, quiet
    ours = {"eval_strategy", "logging_strategy", "save_strategy", "seed", "output_dir", "logging_dir", "use_cpu"}
    searched = {"learning_rate", "num_train_epochs"}  # lr searched, epochs fixed in train: (max_steps -1 already)
    differ = {k for k in user if held[k] != user[k]}
    assert differ - ours == searched, differ - ours
    assert held["learning_rate"] == 0.002 and held["num_train_epochs"] == 1.0


def test_a_module_level_model_under_make_trainer_is_refused_at_the_second_trial(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _scripts_config(tmp_path, fit="fit_shared_model", study={
        "name": "shared", "storage": f"sqlite:///{tmp_path}/s.db", "n_trials": 3})
    with pytest.raises(ConfigError, match=r"hf\.yaml: trainer: make_trainer's Trainer got hf_scripts\.py: "
                                          r"shared_model \(BertForSequenceClassification\), the model object an "
                                          r"earlier trial already trained"):
        autotune.run(cfg)
    trials = open_study(cfg).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL"]  # the run stopped there, not 3 trials later


def test_the_trainer_object_starts_every_trial_from_the_models_first_weights(tmp_path: Path) -> None:
    """The guide's layout: one module-level model in one Trainer, reused by every trial; each trial restores the
    weights the model had when the first trial began (trial 1 does not go on from where trial 0 ended)."""
    cfg = _scripts_config(tmp_path, study={"name": "again", "storage": f"sqlite:///{tmp_path}/a.db",
                                           "n_trials": 2}, train={"device": "cpu", "epochs": 1})
    hf_scripts.SEEN["firsts"] = []
    trials = autotune.run(cfg).study.trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"], [t.user_attrs for t in trials]
    first = hf_scripts.fit.first["bert.embeddings.word_embeddings.weight"]
    assert len(hf_scripts.SEEN["firsts"]) == 2 and all(torch.equal(w, first) for w in hf_scripts.SEEN["firsts"])
    assert trials[0].values[0] == pytest.approx(trials[1].values[0], abs=0.1)



def test_the_users_trainer_object_is_given_back_as_it_was_after_each_trial(tmp_path: Path) -> None:
    """The guide's Trainer outlives the study (a notebook trains it after tuning): after a trial it holds the user's
    own TrainingArguments again (not the trial's lr, bf16, output folder), its accelerator at their precision, and
    its progress bar callback, which autotune takes away only while a trial trains."""
    from transformers import ProgressCallback, Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path / "mine"), learning_rate=3e-3, num_train_epochs=1,
                             save_strategy="no", report_to="none", use_cpu=True)
    trainer = Trainer(model=hf_scripts.new_model(), args=args, train_dataset=hf_scripts.VAL,
                      eval_dataset=hf_scripts.VAL, compute_metrics=hf_scripts.accuracy)
    callbacks = [type(c) for c in trainer.callback_handler.callbacks]
    assert ProgressCallback in callbacks
    res = _trial(tmp_path, {"lr": 0.004, "precision": "bf16"}, fit=hf.trainer_fit(trainer), epochs=None)
    assert res.epochs_run == 1 and res.not_applied == {}
    assert trainer.args.to_dict() == args.to_dict() and trainer.args.learning_rate == 3e-3
    assert trainer.accelerator.mixed_precision == "no"
    assert [type(c) for c in trainer.callback_handler.callbacks] == callbacks


def test_a_trials_persistent_eval_workers_end_with_it_on_the_users_trainer(tmp_path: Path) -> None:
    """A trial that chose persistent DataLoader workers left its evaluation loader cached on the user's Trainer: the
    next trial evaluated with it (the earlier trial's eval batch size), and its worker processes outlived the study
    in the host (a notebook). Each trial's loaders end with it; the Trainer holds none it did not hold before."""
    import multiprocessing

    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path / "mine"), num_train_epochs=1, save_strategy="no",
                             report_to="none", use_cpu=True)
    trainer = Trainer(model=hf_scripts.new_model(), args=args, train_dataset=hf_scripts.VAL,
                      eval_dataset=hf_scripts.VAL, compute_metrics=hf_scripts.accuracy)
    sizes: list[int] = []  # the batch size of the loader each evaluation ran on
    loader_of = trainer.get_eval_dataloader

    def seen(*a: Any, **k: Any) -> Any:
        loader = loader_of(*a, **k)
        sizes.append(loader.total_batch_size)
        return loader

    trainer.get_eval_dataloader = seen  # type: ignore[method-assign]
    fit = hf.trainer_fit(trainer)
    for eval_batch in (16, 64):
        _trial(tmp_path, {"num_workers": 1, "persistent_workers": True, "eval_batch_size": eval_batch}, fit=fit,
               epochs=None)
        assert not hasattr(trainer, "_eval_dataloaders")
        deadline = time.monotonic() + 10
        while multiprocessing.active_children() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not multiprocessing.active_children()
    assert set(sizes) == {16, 64} and sizes == sorted(sizes)  # each trial evaluated at its own batch size


@pytest.mark.parametrize("space,message", [
    ({"channels_last": {"type": "bool"}}, r"space\.channels_last: the Hugging Face integration cannot apply "
                                          r"channels_last: the Trainer keeps the model's memory format"),
    ({"lr_schedule": {"type": "categorical", "choices": ["constant", "onecycle"]}},
     r"space\.lr_schedule: the Hugging Face integration cannot apply lr_schedule onecycle: the Trainer has no "
     r"one-cycle schedule"),
    ({"data_on_device": {"type": "bool"}}, r"space\.data_on_device: the Hugging Face integration cannot apply"),
    ({"dropout": {"type": "float", "low": 0.0, "high": 0.2}},
     r"space\.dropout: .* nothing of yours runs per trial to read it"),
    ({"momentum": {"type": "float", "low": 0.5, "high": 0.9}},
     r"space\.momentum: the Hugging Face integration cannot apply momentum unless optimizer is chosen too: the "
     r"Trainer's own optim takes no momentum from autotune"),
])
def test_settings_the_trainer_cannot_apply_are_refused_at_validation(tmp_path: Path, space: dict[str, Any],
                                                                     message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _scripts_config(tmp_path, space=space)
    _scripts_config(tmp_path, train={"device": "cpu", "channels_last": False})  # (what the Trainer does anyway)
    _scripts_config(tmp_path, train={"device": "cpu", "optimizer": "sgd", "momentum": 0.8})  # (the searched sgd's)


@pytest.mark.parametrize("metric,message", [
    ("eval_accuracy", r"objectives\.0\.metric: the Hugging Face Trainer never reports eval_accuracy: its "
                      r"evaluation's eval_X is stored as val_X .* did you mean val_accuracy\?"),
    ("accuracy", r"never reports accuracy: .* did you mean val_accuracy\?"),
])
def test_an_objective_the_trainer_never_reports_is_refused_at_validation(tmp_path: Path, metric: str,
                                                                        message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _scripts_config(tmp_path, objectives=[{"metric": metric, "direction": "maximize"}, "train_time_s"])


def test_a_val_metric_compute_metrics_never_returns_stops_the_run_at_the_first_trial(tmp_path: Path) -> None:
    cfg = _scripts_config(tmp_path, objectives=[{"metric": "val_acc", "direction": "maximize"}, "train_time_s"],
                          study={"name": "acc", "storage": f"sqlite:///{tmp_path}/m.db", "n_trials": 3},
                          train={"device": "cpu", "epochs": 1})
    with pytest.raises(ConfigError, match=r"objectives\.0\.metric: the Hugging Face Trainer logged no val_acc in "
                                          r"the first epoch's evaluation; it logged: eval_accuracy \(as "
                                          r"val_accuracy\), eval_loss \(as val_loss\), loss \(as train_loss\) "
                                          r"\(did you mean 'val_accuracy'\?\)"):
        autotune.run(cfg)
    assert [t.state.name for t in open_study(cfg).trials] == ["FAIL"]


# ---------------------------------------------------------------- the example study (hf_text), end to end


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
    assert (tmp_path / "runs" / "hf_text" / f"seed-{done.user_attrs['seed']}").is_dir()  # its own output folder
    # best --export: the recommended trial's settings fixed; its one trial trains as it did
    assert main(["best", str(path), "--export", "best.yaml"]) == 0
    text = (tmp_path / "best.yaml").read_text(encoding="utf-8")
    assert "# left to your code, as the trial left them (not set below): " in text
    exported = yaml.safe_load(text)
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
    folders = {p.name for p in (tmp_path / "runs" / "hf_text").iterdir()}
    assert folders >= {f"seed-{t.user_attrs['seed']}" for t in done}  # no two workers in one output_dir


def test_no_lr_multiplier_note_for_the_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Trainer's lr is its learning_rate: a searched lr is the rate, said nowhere else."""
    from autotune.fit import notes

    cfg = autotune.load_config(str(_config(tmp_path, monkeypatch)),
                               overrides={"space.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}})
    assert notes(cfg) == []
