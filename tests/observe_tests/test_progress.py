"""progress.py: the terminal's line per trial and its Pareto table, from trials as the objective stores them."""

from __future__ import annotations

import re
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

import autotune
from autotune import config
from autotune.observe import progress

CFG = config.from_dict({"objectives": ["val_accuracy", "train_time_s"], "study": {"name": "p"}})
LR = {"lr": FloatDistribution(1e-4, 1e-1, log=True)}


def done(acc: float, time_s: float, lr: float = 0.01, **kw: Any) -> optuna.trial.FrozenTrial:
    return create_trial(values=[acc, time_s], params={"lr": lr}, distributions=LR,
                        user_attrs={"val_accuracy": acc, "train_time_s": time_s, "samples_per_s": 12345.6}, **kw)


def study_of(*trials: optuna.trial.FrozenTrial) -> optuna.Study:
    study = optuna.create_study(directions=CFG.directions)
    study.add_trials(trials)
    return study


def lines(capsys: pytest.CaptureFixture[str], study: optuna.Study) -> list[str]:
    view = progress.RunView(CFG, plain=True)
    for t in study.trials:
        view.on_trial(study, t)
    return capsys.readouterr().out.splitlines()


def test_one_line_per_trial_says_how_it_ended(capsys: pytest.CaptureFixture[str]) -> None:
    pruned = create_trial(state=TrialState.PRUNED, params={"lr": 0.05}, distributions=LR,
                          user_attrs={"stop_reason": "diverged", "stop_epoch": 2})
    failed = create_trial(state=TrialState.FAIL, params={"lr": 0.02}, distributions=LR,
                          user_attrs={"stop_reason": "error", "error": "KeyError: 'depth' (at fit.py:7 in fit)"})
    study = study_of(done(0.95, 1.5), pruned, failed, done(0.99, 1.0, constraints={"accuracy_drop": 0.02}))
    ok, stopped, fail, infeasible = lines(capsys, study)
    assert re.fullmatch(r"trial   0  COMPLETE\s+acc 0\.9500  time 1\.50s  samples/s 12,346  \| lr=0\.01", ok)
    assert "PRUNED (diverged @ epoch 2)" in stopped and "acc -  time -" in stopped
    assert "FAIL (error: KeyError: 'depth' (at fit.py:7 in fit))" in fail
    assert "COMPLETE (infeasible)" in infeasible  # violates its constraint: kept, never recommended


def test_trial_line_shows_peak_memory_and_energy_where_measured(capsys: pytest.CaptureFixture[str]) -> None:
    metered = create_trial(values=[0.9, 2.0], params={"lr": 0.01}, distributions=LR,
                           user_attrs={"val_accuracy": 0.9, "train_time_s": 2.0, "peak_memory_mb": 1234.4,
                                       "energy_j": 56.78})
    memory_only = create_trial(values=[0.9, 2.0], params={"lr": 0.01}, distributions=LR,
                               user_attrs={"val_accuracy": 0.9, "train_time_s": 2.0, "peak_memory_mb": 612.0})
    both, one = lines(capsys, study_of(metered, memory_only))
    assert "time 2.00s  memory 1,234MB  energy 56.8J  |" in both
    assert "memory 612MB  |" in one and "energy" not in one  # absent where nothing measured it: no column


def test_a_long_error_is_cut_at_a_word_with_its_place_kept(capsys: pytest.CaptureFixture[str]) -> None:
    words = "ContextMisuse: ctx.report(val_f2=...): 'val_f2' is not an objective or a declared metric; allowed: " \
            "train_loss, val_accuracy, val_loss (declare more under `metrics:` in the YAML)"
    failed = create_trial(state=TrialState.FAIL, params={"lr": 0.02}, distributions=LR,
                          user_attrs={"stop_reason": "error", "error": f"{words} (at fit.py:7 in fit)"})
    (line,) = lines(capsys, study_of(failed))
    shown = re.search(r"FAIL \(error: (.*)\) +acc", line).group(1)  # type: ignore[union-attr]
    assert len(shown) <= progress.ERROR_WIDTH and shown.endswith("... (at fit.py:7 in fit)")
    head = shown.removesuffix("... (at fit.py:7 in fit)")
    assert words.startswith(head) and words[len(head)] in " ;,:", head  # whole words only
    assert progress.clip("x" * 300).endswith("...") and len(progress.clip("x" * 300)) == progress.ERROR_WIDTH
    assert progress.clip("short error") == "short error"


def test_pareto_table_and_recommendation(capsys: pytest.CaptureFixture[str]) -> None:
    study = study_of(done(0.99, 3.0, 0.001), done(0.97, 1.0, 0.002), done(0.90, 2.0, 0.003),
                     done(0.999, 0.5, 0.004, constraints={"accuracy_drop": 0.1}))
    res = autotune.TuneResult(study=study, config=CFG)
    progress.print_pareto(res, plain=True)
    progress.print_best(res)
    out = capsys.readouterr().out
    table = out.split("Pareto front (2 trial(s); * = recommended):\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert table[0].split() == ["trial", "acc", "time", "samples/s", "settings"]
    # fastest first; trial 2 is dominated, trial 3 infeasible
    assert [row.lstrip("*").split()[0] for row in table[1:]] == ["1", "0"]
    best = res.best.number
    assert [row.lstrip("*").split()[0] for row in table[1:] if row.startswith("*")] == [str(best)]
    assert f"Recommended configuration (trial {best}, select: knee): val_accuracy" in out
    assert "autotune best <config> --export best.yaml" in out


def test_fmt_value_and_params() -> None:
    assert progress.fmt_params({"lr": 0.0012345, "optimizer": "adam", "batch_size": 64}) == \
        "lr=0.00123 optimizer=adam batch_size=64"
