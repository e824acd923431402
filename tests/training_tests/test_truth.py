"""What the trial context tells stays true: misuse names the user's line, a non-finite objective stops the trial at
once, only numbers are metrics, "applied" means the setting shaped training, an epoch's lr is the one it trained at,
and a searched lr on a fit's own optimizer says what it became."""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import torch

import autotune
from autotune import config
from autotune.training import ContextMisuse, TrainingPlan, TrialContext
from tests import user_fits


def study(tmp_path: Path, fit: str, **sections: Any) -> config.RunConfig:
    """A one-trial study of a fit from tests/user_fits.py, stored in tmp_path."""
    raw: dict[str, Any] = {
        "study": {"name": "t", "storage": f"sqlite:///{tmp_path}/t.db", "n_trials": 1, "seed": 0},
        "trainer": f"tests.user_fits:{fit}", "train": {"epochs": 2, "batch_size": 100},
        "pruning": {"pruner": "none"}}
    for key, value in sections.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    for key in raw.get("space", {}):
        raw["train"].pop(key, None)
    return config.from_dict(raw, source=str(tmp_path / "t.yaml"))


def line_of(fn: Any, marker: str) -> int:
    """The line of user_fits.py in `fn` that holds `marker` ('def': the def line)."""
    lines, first = inspect.getsourcelines(fn)
    return first if marker == "def" else first + next(i for i, s in enumerate(lines) if marker in s)


# ---------------------------------------------------------------- misuse names the user's file:line (29.6, 34.7)


@pytest.mark.parametrize("fit,marker,space", [
    ("fit_reports_clock", "ctx.report(", {}),
    ("fit_reports_twice", "ctx.report(val_loss", {}),
    ("fit_backward_before_prepare", "ctx.backward(", {}),
    ("fit_catches_stop", "ctx.backward(nn.functional.cross_entropy(model(x), y))\n", {}),
    ("fit_scheduler_before_prepare", "# misuse", {"lr": {"type": "float", "low": 0.5, "high": 2.0}}),
    ("fit_factory_returns_junk", "# misuse", {}),
    ("fit_own_batches_no_samples", "# misuse", {}),
    ("fit_no_epochs", "def", {}),  # found once the fit returned: the fit itself is the place
    ("fit_returns_a_list", "def", {}),
    ("fit_never_reports", "def", {}),
])
def test_every_misuse_names_the_users_file_and_line(tmp_path: Path, fit: str, marker: str,
                                                    space: dict[str, Any]) -> None:
    fn = getattr(user_fits, fit)
    if fit == "fit_catches_stop":  # its second ctx.backward, after the stop it caught
        lines, first = inspect.getsourcelines(fn)
        line = first + max(i for i, s in enumerate(lines) if s.endswith(marker))
    else:
        line = line_of(fn, marker)
    where = f"(at user_fits.py:{line} in {fit})"
    sections: dict[str, Any] = {"space": space} if space else {}
    if fit == "fit_catches_stop":
        sections["pruning"] = {"pruner": "none", "slow": {"max_trial_seconds": 1e-6}}  # stopped as slow
        sections["train"] = {"epochs": 3, "batch_size": 100}
    (t,) = autotune.run(study(tmp_path, fit, **sections)).study.trials
    assert t.state.name == "FAIL"
    assert t.user_attrs["error"].startswith("ContextMisuse: ") and t.user_attrs["error"].endswith(where), \
        t.user_attrs["error"]
    assert "misuse.py" not in t.user_attrs["error"] and "stepper.py" not in t.user_attrs["error"]
    if fit not in ("fit_never_reports", "fit_catches_stop"):  # (the study finds these: no lone call raises)
        with pytest.raises(ContextMisuse) as caught:  # the error itself, outside a study, says it too
            autotune.train(study(tmp_path, fit, **sections), params={k: 1.0 for k in space})
        assert str(caught.value).endswith(where) and str(caught.value).count("(at ") == 1


# ---------------------------------------------------------------- a non-finite objective stops at once (29.7)


def test_a_non_finite_objective_of_any_name_stops_the_trial_at_that_epoch(tmp_path: Path) -> None:
    cfg = study(tmp_path, "fit_nan_perplexity", train={"epochs": 4, "batch_size": 100}, metrics=["grad_norm"],
                objectives=[{"metric": "val_ppl", "direction": "minimize"}, "train_time_s"])
    (t,) = autotune.run(cfg).study.trials
    assert t.state.name == "PRUNED"
    assert (t.user_attrs["stop_reason"], t.user_attrs["stop_epoch"]) == ("diverged", 2)
    assert t.user_attrs["stop_detail"] == "non-finite val_ppl (an objective)"
    history = t.user_attrs["history"]
    assert len(history) == 2 and math.isnan(history[0]["grad_norm"])  # a metric that is no objective: recorded


def test_a_non_finite_metric_that_is_no_objective_is_recorded_and_training_goes_on() -> None:
    ctx = TrialContext(TrainingPlan.bare({"device": "cpu", "epochs": 2}, config=None))
    for epoch in ctx.epochs():
        ctx.report(grad_norm=math.nan if epoch == 1 else 1.0, val_loss=1.0)
    assert len(ctx._state.history) == 2 and ctx._state.stop is None


# ---------------------------------------------------------------- only numbers are metrics (34.5)


@pytest.mark.parametrize("value,shown", [
    (True, "got bool True"), (np.bool_(False), "got bool False"), ("0.9", "got str '0.9'"), (None, "got NoneType"),
    (torch.tensor([0.5, 0.7]), "got a tensor of shape (2,)"), (torch.tensor(True), "got bool True"),
    (np.array([0.1, 0.2]), "got an array of shape (2,)"), ([0.5], "got list"),
])
def test_a_metric_that_is_not_a_number_is_refused_at_the_users_line(value: Any, shown: str) -> None:
    ctx = TrialContext({"device": "cpu", "epochs": 1})
    with pytest.raises(ContextMisuse) as caught:
        user_fits.fit_reports(value)(ctx)
    text = str(caught.value)
    assert text.startswith("ctx.report(val_accuracy=...): a metric is a number") or "one number" in text
    assert shown in text
    assert text.endswith(f"(at user_fits.py:{line_of(user_fits.fit_reports, 'the line a misuse names')} in fit)")


@pytest.mark.parametrize("value", [0.5, 1, np.float32(0.5), np.float64(0.5), np.int64(1), torch.tensor(0.5),
                                   torch.tensor([0.5]), np.array(0.5)])
def test_numbers_zero_d_tensors_and_numpy_scalars_are_metrics(value: Any) -> None:
    ctx = TrialContext({"device": "cpu", "epochs": 1})
    user_fits.fit_reports(value)(ctx)
    assert ctx._state.history[0].metrics["val_accuracy"] == pytest.approx(float(value))


def test_a_bool_objective_fails_the_trial_instead_of_sitting_on_the_front(tmp_path: Path) -> None:
    res = autotune.run(study(tmp_path, "fit_reports_a_bool"))
    (t,) = res.study.trials
    assert t.state.name == "FAIL" and "got bool" in t.user_attrs["error"] and "val_accuracy" in t.user_attrs["error"]
    assert res.pareto == [] and optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path}/t.db").trials


# ---------------------------------------------------------------- "applied" means it shaped training (29.4)

OWN_OPTIMIZER_SPACE = {
    "optimizer": {"type": "categorical", "choices": ["rmsprop", "adam"]},
    "lr_schedule": {"type": "categorical", "choices": ["cosine", "onecycle"]},
    "weight_decay": {"type": "float", "low": 1e-5, "high": 1e-2, "log": True},
    "lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
    "label_smoothing": {"type": "float", "low": 0.0, "high": 0.2},
}


def test_settings_a_fit_reads_for_logging_are_not_applied_by_their_reads(tmp_path: Path) -> None:
    from autotune.observe import export

    user_fits.LOGGED.clear()
    res = autotune.run(study(tmp_path, "fit_logs_settings", space=OWN_OPTIMIZER_SPACE))
    (t,) = res.study.trials
    assert t.state.name == "COMPLETE" and set(user_fits.LOGGED[0]) >= {"optimizer", "lr_schedule"}  # all read
    na = t.user_attrs["not_applied"]
    assert set(na) == {"optimizer", "lr_schedule", "weight_decay", "lr"}
    assert na["optimizer"] == na["weight_decay"] == "your fit built its own optimizer: optimizer, weight_decay were " \
                                                    "not used"
    assert "own learning-rate scheduler" in na["lr_schedule"]
    assert na["lr"].startswith("your fit read lr before ctx.prepare, but no group of its own optimizer has that lr")
    # stored, recommended and exported: only what shaped the training (the loss setting: read, the only evidence)
    stored = t.user_attrs["settings"]
    assert not {"optimizer", "lr_schedule", "weight_decay", "lr", "momentum"} & set(stored), stored
    assert res.best is not None and set(res.best.params) == {"label_smoothing"}
    doc = export.best_yaml(res.config, res.best)
    assert not {"optimizer", "lr_schedule", "weight_decay", "lr", "momentum"} & set(doc["train"])


def test_never_used_defaults_are_not_stored_as_the_trials_settings(tmp_path: Path) -> None:
    cfg = study(tmp_path, "fit_own_optimizer", space={"lr": {"type": "float", "low": 0.5, "high": 2.0}})
    (t,) = autotune.run(cfg).study.trials
    stored = t.user_attrs["settings"]
    assert "lr" in stored and "not_applied" not in t.user_attrs  # the multiplier acted
    assert not {"optimizer", "momentum", "weight_decay", "lr_schedule"} & set(stored), stored  # never used


def test_the_builtin_optimizer_counts_only_once_it_steps_whoever_reads_its_settings() -> None:
    keys = ("optimizer", "lr", "momentum", "weight_decay", "lr_schedule")
    searched = {"device": "cpu", "epochs": 1, "batch_size": 100, "optimizer": "sgd", "lr": 0.1, "momentum": 0.5,
                "weight_decay": 1e-4, "lr_schedule": "cosine"}
    # built and never stepped (the loop evaluates only): nothing of it acted, though the fit read every key
    ctx = TrialContext(TrainingPlan.bare(searched, searched=keys))
    model, opt = ctx.prepare(user_fits.MLP())
    _ = [ctx.settings[k] for k in keys]
    for _ in ctx.epochs():
        ctx.report(val_loss=1.0)
    assert set(ctx._state.unapplied()) == set(keys)
    assert ctx._state.unapplied()["optimizer"] == "the optimizer the context built never stepped"
    # stepped by the fit's own opt.step() (no ctx.backward): the optimizer's settings acted, the schedule did not
    ctx = TrialContext(TrainingPlan.bare(searched, searched=keys))
    model, opt = ctx.prepare(user_fits.MLP())
    for _ in ctx.epochs():
        for x, y in ctx.loader((user_fits.X, user_fits.Y)):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        ctx.report(val_loss=1.0)
    assert set(ctx._state.unapplied()) == {"lr_schedule"}


def test_an_own_optimizer_built_with_the_values_read_applies_them() -> None:
    ctx = TrialContext(TrainingPlan.bare({"device": "cpu", "epochs": 1, "batch_size": 100, "lr": 0.05, "momentum": 0.7,
                                          "weight_decay": 1e-3, "optimizer": "adam"},
                                         searched=("lr", "momentum", "weight_decay", "optimizer")))
    s = ctx.settings
    net = user_fits.MLP()
    model, opt = ctx.prepare(net, torch.optim.SGD(net.parameters(), lr=s.lr, momentum=s.momentum,
                                                  weight_decay=s.weight_decay))
    for _ in ctx.epochs():
        for x, y in ctx.loader((user_fits.X, user_fits.Y)):
            ctx.backward(torch.nn.functional.cross_entropy(model(x), y))
        ctx.report(val_loss=1.0)
    assert [g["lr"] for g in opt.param_groups] == [0.05]  # built with it: not scaled by it again
    assert set(ctx._state.unapplied()) == {"optimizer"}  # the family is the fit's (SGD), whatever it read


# ---------------------------------------------------------------- a searched lr on the fit's own optimizer (29.8)


def test_a_searched_lr_on_the_fits_own_optimizer_says_what_it_became(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    import io
    import logging
    from contextlib import redirect_stdout

    from autotune.fit.checks import notes
    from autotune.observe import export, progress

    cfg = study(tmp_path, "fit_own_optimizer", study={"n_trials": 2},
                space={"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}})  # written as absolute rates
    (note,) = notes(cfg)  # at validation and at the run's start
    assert note.startswith("t.yaml: space.lr: with trainer: tests.user_fits:fit_own_optimizer, lr is the learning "
                           "rate only when") and "multiplies each parameter group's own lr" in note
    with caplog.at_level(logging.WARNING):
        res = autotune.run(cfg)
    said = [r.getMessage() for r in caplog.records if "multiplies your optimizer's group lrs" in r.getMessage()]
    assert len(said) == 1  # once per run
    t0 = res.study.trials[0]
    assert f"lr {t0.params['lr']:.3g} multiplies your optimizer's group lrs (0.01, 0.64) → (" in said[0]
    for t in res.study.trials:
        assert t.user_attrs["own_group_lrs"] == [0.01, 0.64]
        assert t.user_attrs["effective_lrs"] == pytest.approx([0.01 * t.params["lr"], 0.64 * t.params["lr"]])
    best = res.best
    assert best is not None and best.effective_lrs is not None
    out = io.StringIO()
    with redirect_stdout(out):
        progress.print_best(res)  # `autotune best`
    lr = best.params["lr"]
    shown = f"lr {lr:.3g} multiplies your optimizer's group lrs (0.01, 0.64) → ({0.01 * lr:.3g}, {0.64 * lr:.3g})"
    assert f"  ({shown})" in out.getvalue()
    text = export.render(cfg, best, export.best_yaml(cfg, best))  # `best --export`
    assert f"# {shown}: lr below is that multiplier, not a rate" in text
    assert export.best_yaml(cfg, best)["train"]["lr"] == lr  # the export trains at the same rates


def test_validate_notes_a_searched_lr_only_where_it_may_mislead(tmp_path: Path) -> None:
    from autotune.fit.checks import notes

    multiplier = study(tmp_path, "fit_own_optimizer", space={"lr": {"type": "float", "low": 0.25, "high": 4.0}})
    builtin = config.from_dict({"study": {"name": "b"}, "space": {"lr": {"type": "float", "low": 1e-3,
                                                                         "high": 1e-2}}})
    assert notes(multiplier) == [] and notes(builtin) == []


# ---------------------------------------------------------------- an epoch's lr is the one it trained at (29.9)


def test_an_epochs_lr_is_the_one_its_steps_took_not_the_one_after_the_fits_scheduler() -> None:
    """pytorch/examples mnist: StepLR stepped at the end of each epoch; the epoch trained at the lr before it."""
    ctx = TrialContext({"device": "cpu", "epochs": 3, "batch_size": 100})
    net = user_fits.MLP()
    model, opt = ctx.prepare(net, torch.optim.SGD(net.parameters(), lr=0.8))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    train = ctx.loader((user_fits.X, user_fits.Y))
    for _ in ctx.epochs():
        for x, y in train:
            ctx.backward(torch.nn.functional.cross_entropy(model(x), y))
        sched.step()  # before the report, as a loop may do
        ctx.report(val_loss=1.0)
    assert [h.lr for h in ctx._state.history] == pytest.approx([0.8, 0.4, 0.2])


def test_an_epochs_lr_counts_the_steps_of_a_loop_that_steps_its_own_optimizer() -> None:
    ctx = TrialContext({"device": "cpu", "epochs": 2, "batch_size": 300})
    net = user_fits.MLP()
    model, opt = ctx.prepare(net, torch.optim.SGD(net.parameters(), lr=1.0))
    for epoch in ctx.epochs():
        for i, (x, y) in enumerate(ctx.loader((user_fits.X, user_fits.Y))):  # 2 steps: lr 1.0 then 0.5 (epoch 1)
            for g in opt.param_groups:
                g["lr"] = 1.0 / (1 + i) / epoch
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        for g in opt.param_groups:
            g["lr"] = 99.0  # set for what comes next: not what this epoch trained at
        ctx.report(val_loss=1.0)
    assert [h.lr for h in ctx._state.history] == pytest.approx([0.75, 0.375])


def test_a_misspelt_report_stops_the_run_naming_the_users_file_and_line(tmp_path: Path) -> None:
    """An own fit's unknown `ctx.report` name is a ConfigError at that report (issue 49), and it still names the
    user's file and line, not autotune's."""
    where = f"user_fits.py:{line_of(user_fits.fit_reports_unknown, 'ctx.report(')}"
    with pytest.raises(autotune.ConfigError) as caught:
        autotune.run(study(tmp_path, "fit_reports_unknown"))
    assert where in str(caught.value) and "misuse.py" not in str(caught.value), str(caught.value)
