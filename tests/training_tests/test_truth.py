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
from autotune.training._context import ContextMisuse, TrialContext
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
    ("fit_reports_unknown", "ctx.report(", {}),
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
    assert "_misuse.py" not in t.user_attrs["error"] and "_stepper.py" not in t.user_attrs["error"]
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
    ctx = TrialContext({"device": "cpu", "epochs": 2}, config=None)
    for epoch in ctx.epochs():
        ctx.report(grad_norm=math.nan if epoch == 1 else 1.0, val_loss=1.0)
    assert len(ctx.history) == 2 and ctx.stop is None


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
    assert ctx.history[0].metrics["val_accuracy"] == pytest.approx(float(value))


def test_a_bool_objective_fails_the_trial_instead_of_sitting_on_the_front(tmp_path: Path) -> None:
    res = autotune.run(study(tmp_path, "fit_reports_a_bool"))
    (t,) = res.study.trials
    assert t.state.name == "FAIL" and "got bool" in t.user_attrs["error"] and "val_accuracy" in t.user_attrs["error"]
    assert res.pareto == [] and optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path}/t.db").trials
