"""context/applied.py (the ledger) and reasons.py: a searched setting nothing in the trial used is `not_applied`, and
left out of the recommendation."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import torch

import autotune
from autotune import config
from autotune.observe import export, progress, report
from autotune.search import results
from autotune.spec.settings import Settings
from autotune.training import TrainingPlan, TrialContext, run_fit
from tests import user_fits

REPO = Path(__file__).resolve().parents[2]


def user_study(tmp_path: Path, fit: str, space: dict[str, Any], n_trials: int = 3) -> config.RunConfig:
    return config.from_dict({
        "study": {"name": "u", "storage": f"sqlite:///{tmp_path}/u.db", "n_trials": n_trials, "sampler": "random",
                  "seed": 1},
        "trainer": f"tests.user_fits:{fit}", "train": {"epochs": 1, "batch_size": 100}, "space": space,
        "pruning": {"pruner": "none"}}, source=str(tmp_path / "u.yaml"))


def test_a_watched_settings_view_notes_what_is_read_not_what_is_asked_about() -> None:
    reads: set[str] = set()
    s = Settings({"lr": 0.1}).watched(reads)
    assert "lr" in s and list(s)[:1] and reads == set()  # membership and names are not reads
    assert s.lr == s["lr"] == 0.1 and s.get("momentum") == 0.9
    assert reads == {"lr", "momentum"}
    assert isinstance(s, Settings) and type(Settings(s)) is Settings
    Settings(s)["weight_decay"]  # a plain copy: its reads are not noted
    assert reads == {"lr", "momentum"}
    with pytest.raises(AttributeError, match="frozen"):
        s.lr = 1.0  # type: ignore[misc]


def test_user_parameters_read_through_params_count_as_used() -> None:
    ctx = TrialContext(TrainingPlan.bare({"device": "cpu"}, user={"width": 8, "depth": 2},
                                         searched=("user.width", "user.depth")))
    assert ctx.params["width"] == 8 and "depth" in ctx.params
    assert ctx._state.unapplied() == {"user.depth": "ctx.params['depth'] was never read"}


def test_builtin_trainer_applies_every_setting_of_a_normal_space(tmp_path: Path) -> None:
    cfg = autotune.load_config(str(REPO / "search_spaces" / "cnn.yaml"), overrides={
        "study.storage": f"sqlite:///{tmp_path}/b.db", "study.n_trials": 4, "study.sampler": "random",
        "study.timeout": None, "model.channels": [4, 8], "model.hidden": 16, "train.device": "cpu",
        "space.epochs": {"type": "int", "low": 1, "high": 2}, "space.batch_size": {"type": "categorical",
                                                                                     "choices": [128, 256]},
        "space.momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": ["sgd", "sgd_nesterov",
                                                                                             "rmsprop"]}},
        "space.grad_clip": {"type": "float", "low": 0.0, "high": 1.0}, "space.aug_flip": {"type": "bool"},
        "pruning.pruner": "none"})
    trials = autotune.run(cfg).study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    assert {t.number: t.user_attrs.get("not_applied") for t in trials} == {t.number: None for t in trials}


def test_own_optimizer_schedule_and_loss_leave_searched_settings_out(tmp_path: Path) -> None:
    space = {"lr": {"type": "float", "low": 0.25, "high": 4.0, "log": True},
             "optimizer": {"type": "categorical", "choices": ["sgd", "rmsprop", "adam"]},
             "weight_decay": {"type": "float", "low": 1e-5, "high": 1e-2, "log": True},
             "label_smoothing": {"type": "float", "low": 0.0, "high": 0.2},
             "lr_schedule": {"type": "categorical", "choices": ["cosine", "onecycle"]}}
    cfg = user_study(tmp_path, "fit_own_optimizer", space)
    user_fits.OWN_LRS.clear()
    res = autotune.run(cfg)
    trials = res.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    for t in trials:
        na = t.user_attrs["not_applied"]
        assert set(na) == {"optimizer", "weight_decay", "label_smoothing", "lr_schedule"}
        assert na["optimizer"] == na["weight_decay"] == \
            "your fit built its own optimizer: optimizer, weight_decay were not used"
        assert na["label_smoothing"].startswith("label_smoothing was never read: the loss is your own")
        assert "own learning-rate scheduler" in na["lr_schedule"]
    # the searched lr did change the training: each group's own lr times it, the 64x ratio kept
    assert [lrs for lrs in user_fits.OWN_LRS] == [pytest.approx([0.01 * t.params["lr"], 0.64 * t.params["lr"]])
                                                  for t in trials]
    best = res.best
    assert best is not None and set(best.params) == {"lr"} and set(best.not_applied) == set(na)
    out = io.StringIO()
    with redirect_stdout(out):
        progress.print_best(res)
    printed = out.getvalue()
    lines = printed.splitlines()
    assert any(line.startswith("  lr: ") for line in lines)
    assert not any(line.startswith(("  optimizer:", "  weight_decay:", "  label_smoothing:")) for line in lines)
    assert "  (label_smoothing: not applied, left out: label_smoothing was never read" in printed
    rec = report.summary_data(res.study, cfg)["recommended"]
    assert set(rec["params"]) == {"lr"} and "weight_decay" in rec["not_applied"]
    html = report.render(report.build(res.study, cfg))
    assert "searched but not applied (left out): label_smoothing, lr_schedule, optimizer, weight_decay" in html
    doc = export.best_yaml(cfg, best)
    assert doc["train"]["lr"] == best.params["lr"]
    assert not {"optimizer", "weight_decay", "label_smoothing", "lr_schedule"} & set(doc["train"])


def test_a_setting_the_users_loss_reads_is_applied(tmp_path: Path) -> None:
    space = {"label_smoothing": {"type": "float", "low": 0.0, "high": 0.2},
             "momentum": {"type": "float", "low": 0.5, "high": 0.9}}  # adam (the default) takes no momentum
    trials = autotune.run(user_study(tmp_path, "fit_own_loss_reads_smoothing", space, n_trials=1)).study.trials
    assert trials[0].user_attrs["not_applied"] == {"momentum": "optimizer adam takes no momentum"}


def test_settings_only_a_loop_of_its_own_skips_are_named(tmp_path: Path) -> None:
    ctx = TrialContext(TrainingPlan.bare({"device": "cpu", "grad_clip": 0.5, "precision": "bf16"},
                                         searched=("grad_clip", "precision", "batch_size", "init")))
    model, opt = ctx.prepare(user_fits.MLP(), init=False)
    x, y = user_fits.X[:64], user_fits.Y[:64]
    for _ in ctx.epochs():
        loss = torch.nn.functional.cross_entropy(model(x), y)  # no ctx.loader, no ctx.autocast, no ctx.backward
        loss.backward()
        opt.step()
        ctx.report()
        break
    na = ctx._state.unapplied()
    assert na["grad_clip"] == "ctx.backward(loss) was never called: your loop steps the optimizer itself"
    assert na["precision"].startswith("ctx.autocast() was never used")
    assert na["batch_size"].startswith("your fit never called ctx.loader(...)")
    assert na["init"] == "ctx.prepare(..., init=False) kept the model's weights"


def test_summaries_leave_out_what_a_trial_did_not_apply(tmp_path: Path) -> None:
    import optuna

    study = optuna.create_study()
    trial = study.ask()
    trial.suggest_float("lr", 0.1, 1.0)
    trial.suggest_categorical("optimizer", ["sgd", "adam"])
    trial.set_user_attr("not_applied", {"optimizer": "your fit built its own optimizer: optimizer was not used",
                                        "data_on_device": "the data is a Dataset"})  # (not searched: not listed)
    trial.set_user_attr("seed", 7)
    study.tell(trial, 0.5)
    s = results.summarize(study.trials[0], ["val_accuracy"])
    assert set(s.params) == {"lr"} and set(s.not_applied) == {"optimizer"} and s.seed == 7


def test_a_fixed_setting_nothing_applied_is_not_applied_too() -> None:
    """A setting fixed in `train:` is chosen as a searched one is: one the trial could not apply (a loss of the fit's
    own that never reads label_smoothing; momentum under adam) is recorded, not silently dropped; those the context
    applies around every trial (cpu_threads, time_excludes_compile) and the built-in trainer's steps at their
    default need no read."""
    values = {"device": "cpu", "epochs": 1, "batch_size": 100, "label_smoothing": 0.1, "momentum": 0.5,
              "cpu_threads": 1, "time_excludes_compile": True, "prune_method": "none"}
    ctx = TrialContext(TrainingPlan.bare(values, fixed=tuple(values)))
    r = run_fit(user_fits.fit, ctx)
    assert r.not_applied == {
        "label_smoothing": "label_smoothing was never read: the loss is your own (read ctx.settings.label_smoothing "
                           "in it to search it)",
        "momentum": "optimizer adam takes no momentum"}
