"""Memory that leaks across trials (a real fit keeps a tensor per trial in a module-level list): each trial's own
rule sees ~0 MB of growth, so the growth of the process's baseline across trials is a stop reason of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from torch import nn

import autotune
from autotune import config
from autotune.core import hostmem
from autotune.study import growth
from tests.user_fits import MLP, X, Y, accuracy, fit

KEPT: list[torch.Tensor] = []  # the leak: what every trial leaves behind
LEAK_MB = 100


def fit_leaks(ctx: autotune.TrialContext) -> None:
    """The README's fit, plus one 'cache' tensor per trial it never lets go of (written to: really resident)."""
    model, _ = ctx.prepare(MLP())
    KEPT.append(torch.ones(LEAK_MB * 2**20 // 4))
    for _ in ctx.epochs():
        for x, y in ctx.loader((X, Y)):
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        acc, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


@pytest.fixture(autouse=True)
def leak_freed() -> Any:
    yield
    KEPT.clear()


def cfg_of(tmp_path: Path, n_trials: int = 12, **pruning: Any) -> Any:
    return config.from_dict({"study": {"name": "m", "storage": f"sqlite:///{tmp_path}/m.db", "n_trials": n_trials},
                             "train": {"epochs": 1, "batch_size": 64}, "pruning": pruning},
                            source=str(tmp_path / "m.yaml"))


def trials(tmp_path: Path) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="m", storage=f"sqlite:///{tmp_path}/m.db").trials


def test_memory_leaking_across_trials_stops_the_run_with_one_line(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 50 item 6 (before: all 12 trials COMPLETE, the process 1.2 GB larger, nothing said)."""
    monkeypatch.setattr(growth, "LEAK_MIN_MB", 250.0)  # (the default 1 GB: 10+ trials of this leak)
    with pytest.raises(autotune.AutotuneError, match=r"memory grows across trials: the process held \d+ MB after "
                                                     r"trial 0 and \d+ MB after trial 3 \(\+\d+ MB a trial") as e:
        autotune.run(cfg_of(tmp_path), fit_leaks)
    assert "\n" not in str(e.value) and "module-level list" in str(e.value)
    ts = trials(tmp_path)
    assert [t.state.name for t in ts] == ["COMPLETE"] * 4  # stopped after the trial that showed it; all kept


def test_a_baseline_over_max_host_memory_stops_the_run_instead_of_pruning_every_trial(tmp_path: Path) -> None:
    """Issue 50 item 6 with pruning.max_host_memory_mb (before: once the leak passed the cap, every later trial
    was pruned oom at its start, and the run went on)."""
    rss = hostmem.rss_mb()
    assert rss is not None
    cap = rss + 6 * LEAK_MB  # above the first trials' baseline (the run's imports, trial 0), then passed by the leak
    with pytest.raises(autotune.AutotuneError, match=r"memory grows across trials: the process holds \d+ MB between "
                                                     r"trials \(after trial \d+.*pruning.max_host_memory_mb"):
        autotune.run(cfg_of(tmp_path, max_host_memory_mb=cap), fit_leaks)
    ts = trials(tmp_path)
    states = [(t.state.name, t.user_attrs.get("stop_reason")) for t in ts]
    assert len(ts) < 12 and ts[0].state.name == "COMPLETE", states
    assert sum(t.user_attrs.get("stop_reason") == "oom" for t in ts) <= growth.OOM_IN_A_ROW


def test_memory_that_stays_flat_across_trials_is_no_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(growth, "LEAK_MIN_MB", 250.0)
    autotune.run(cfg_of(tmp_path, n_trials=6), fit)
    assert [t.state.name for t in trials(tmp_path)] == ["COMPLETE"] * 6
