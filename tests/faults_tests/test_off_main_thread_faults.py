"""A study run off the main thread (a web handler, a ThreadPoolExecutor): signals never reach it, so it has a
documented cancel (`autotune.run(cfg, cancel=threading.Event())`), one warning naming what is off there, and its
limits (hang_seconds, the memory guard) hold there too."""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import optuna
import pytest

import autotune
from autotune import config


def cfg_of(tmp_path: Path, n_trials: int = 30, **sections: Any) -> Any:
    raw: dict[str, Any] = {"study": {"name": "t", "storage": f"sqlite:///{tmp_path}/t.db", "n_trials": n_trials},
                           "trainer": "tests.guest_fits:fit_slow", "train": {"epochs": 2, "batch_size": 10}}
    raw.update(sections)
    return config.from_dict(raw, source=str(tmp_path / "t.yaml"))


def states(tmp_path: Path) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path}/t.db").get_trials(deepcopy=False)


def counts(tmp_path: Path) -> dict[str, int]:
    """The trials' states, read as another process would (read-only; nothing while the storage is being made)."""
    try:
        with sqlite3.connect(f"file:{tmp_path}/t.db?mode=ro", uri=True) as db:
            return dict(db.execute("SELECT state, COUNT(*) FROM trials GROUP BY state").fetchall())
    except sqlite3.Error:
        return {}


def test_setting_the_cancel_event_stops_a_study_in_a_thread_pool(tmp_path: Path, capfd: Any) -> None:
    """Issue 50 item 8 (before: no way to stop it; `cancel=` did not exist and Ctrl-C never reached the thread)."""
    cancel = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(autotune.run, cfg_of(tmp_path), cancel=cancel)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not future.done():  # one trial done, the next training
            if counts(tmp_path).get("COMPLETE", 0) >= 1 and counts(tmp_path).get("RUNNING", 0):
                break
            time.sleep(0.1)
        time.sleep(1.0)
        t0 = time.monotonic()
        cancel.set()
        result = future.result(timeout=60)
        took = time.monotonic() - t0
    assert took < 5.0, took
    trials = states(tmp_path)
    assert [t.state.name for t in trials[:-1]] == ["COMPLETE"] * (len(trials) - 1) and len(trials) < 30
    last = trials[-1]
    assert last.state.name == "FAIL" and last.user_attrs["stop_reason"] == "interrupted", last.user_attrs
    assert "cancelled" in last.user_attrs["error"], last.user_attrs
    assert len(result.study.trials) == len(trials)
    err = capfd.readouterr().err
    assert err.count("not the main thread") == 1, err
    assert "Ctrl-C and SIGTERM do not reach it" in err and "cancel=" in err, err


def fit_evaluates_for_a_minute(ctx: autotune.TrialContext) -> None:
    """An evaluation loop in Python that calls nothing of the context (only the watch can stop it)."""
    from tests.user_fits import MLP

    ctx.prepare(MLP())
    for _ in ctx.epochs():
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            time.sleep(0.05)


def test_the_hang_limit_holds_off_the_main_thread(tmp_path: Path) -> None:
    """hang_seconds interrupts a trial trained in a worker thread (before: the watch was off there, silently: the
    trial ran its whole minute)."""
    cfg = cfg_of(tmp_path, n_trials=1, pruning={"slow": {"hang_seconds": 1}})
    with ThreadPoolExecutor(1) as pool:
        t0 = time.monotonic()
        pool.submit(autotune.run, cfg, fit_evaluates_for_a_minute).result(timeout=90)
    assert time.monotonic() - t0 < 30
    (t,) = states(tmp_path)
    assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "hang", t.user_attrs


def test_cancel_must_be_an_event(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="cancel: a threading.Event"):
        autotune.run(cfg_of(tmp_path), cancel=True)  # type: ignore[arg-type]
