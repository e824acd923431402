"""CPU contention: the share of the CPU this process gets, the oversubscription verdict, the thread counts."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
import torch

import autotune
from autotune import config
from autotune.core import contention
from autotune.core.contention import Share
from autotune.spec import Settings
from autotune.spec.settings import merge
from autotune.training import accel
from tests.support import busy, spin_share


def test_default_threads_divide_the_cores_among_workers_and_loader_processes() -> None:
    assert contention.default_threads(n_cores=8) == 8
    assert contention.default_threads(2, n_cores=8) == 4
    assert contention.default_threads(2, loader_workers=2, n_cores=8) == 2
    assert contention.default_threads(4, loader_workers=4, n_cores=8) == 1  # never below one
    assert contention.default_threads(3, n_cores=2) == 1


def test_loader_workers_take_cores_from_torch_threads() -> None:
    old = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        with accel.backend_flags(Settings(merge({}, {"data_on_device": False, "num_workers": 1}))):
            assert torch.get_num_threads() == 3
        with accel.backend_flags(Settings(merge({}, {"data_on_device": False, "num_workers": 2, "cpu_threads": 4}))):
            assert torch.get_num_threads() == 4  # the user's own count wins
        with accel.backend_flags(Settings(merge({}, {"data_on_device": True, "num_workers": 2}))):
            assert torch.get_num_threads() == 4  # no loader processes run
        assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(old)


def test_verdict_needs_both_waiting_and_a_collapse() -> None:
    waited, quiet = Share(1.0, 1.0, 1.0, 0.5), Share(1.0, 2.0, 0.05, 0.024)
    found = contention.verdict(200.0, 1000.0, waited, 2)
    assert found is not None and found["ratio"] == 0.2 and found["threads"] == 2 and found["waiting"] == 0.5
    assert contention.verdict(200.0, 1000.0, quiet, 2) is None  # slow, but its threads had the cores: its speed
    assert contention.verdict(900.0, 1000.0, waited, 2) is None  # waited a little, kept its speed
    assert contention.verdict(500.0, None, waited, 2)["ratio"] is None  # no uncontended figure to compare with


def test_cap_halves_and_only_goes_down() -> None:
    assert contention.lower_cap(None, 4) == 2
    assert contention.lower_cap(2, 8) == 2  # a later verdict at more threads does not raise it
    assert contention.lower_cap(2, 2) == 1
    assert contention.lower_cap(1, 1) == 1


def test_waiting_share_rises_with_a_competing_busy_process() -> None:
    # relative to this process's own measurement without the competitor: other people's jobs on a shared
    # machine may already take some of the cores
    quiet = spin_share()
    with busy(seconds=10, n=2 * contention.cores()):
        loaded = spin_share()
    assert contention.contended(loaded), loaded  # the detection fires, whatever else runs here
    if quiet.waiting > 0.75:
        pytest.skip(f"this machine is already saturated (waiting {quiet.waiting:.0%} without the competitor): "
                    "no quiet figure to compare with")
    assert loaded.waiting > quiet.waiting + 0.1, (quiet, loaded)
    assert loaded.run_s < quiet.run_s  # the CPU it got, not only the time it waited


def test_quiet_single_thread_is_not_contended_unless_the_machine_is() -> None:
    """On a quiet core a thread barely waits; a verdict then never fires, however slow the trial."""
    share = spin_share(threads=1, seconds=0.5)
    if share.waiting >= contention.WAITING:
        pytest.skip(f"this machine is oversubscribed by other processes (waiting {share.waiting:.0%})")
    assert not contention.contended(share)
    assert contention.verdict(1.0, 1000.0, share, 1) is None


def study_cfg(tmp_path: Path, n_trials: int) -> config.RunConfig:
    return config.from_dict({"study": {"name": "c", "storage": f"sqlite:///{tmp_path}/c.db", "n_trials": n_trials},
                             "objectives": [{"metric": "val_accuracy"}],
                             "model": {"name": "cnn", "channels": [16, 32], "hidden": 64},
                             "train": {"device": "cpu", "epochs": 1, "batch_size": 64}})


@pytest.mark.slow
def test_a_trial_on_oversubscribed_cores_is_recorded_and_the_next_ones_use_fewer_threads(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # the verdict on a trial that ran oversubscribed (the cores got busy during the run): the check before a run's
    # first trial, which would start it capped, is left out (its own test below)
    monkeypatch.setattr(contention, "busy_now", lambda *a, **k: None)
    old = torch.get_num_threads()
    threads = contention.cores()
    torch.set_num_threads(threads)
    try:
        if contention.contended(spin_share(threads=threads)):
            pytest.skip("this machine is already oversubscribed")
        quiet = autotune.run(study_cfg(tmp_path, 1)).study.trials[0]
        assert "oversubscribed" not in quiet.user_attrs, quiet.user_attrs  # quiet: it had its cores
        assert quiet.user_attrs["probe"]["samples_per_s"] > 0
        with busy(seconds=60), caplog.at_level(logging.WARNING):
            study = autotune.run(study_cfg(tmp_path, 3)).study
        loaded, after = study.trials[1], study.trials[2]
        found = loaded.user_attrs["oversubscribed"]
        assert found["ratio"] < contention.COLLAPSE and found["threads"] == threads
        assert found["waiting"] >= contention.WAITING
        said = [r.getMessage() for r in caplog.records if "oversubscribed" in r.getMessage()]
        assert len(said) == 1 and said[0].startswith("warning: the built-in trainer: trial 1 ran oversubscribed: ")
        assert "cpu_threads_capped" not in loaded.user_attrs
        assert after.user_attrs["cpu_threads_capped"] == max(1, threads // 2)  # the next trial: fewer threads
        assert torch.get_num_threads() == threads  # only inside the trials
        quiet_probe = study.user_attrs[next(k for k, v in study.user_attrs.items()
                                            if k.startswith("probe:") and v["source"] == "trial 0")]
        assert round(quiet_probe["samples_per_s"], 4) == quiet.user_attrs["probe"]["samples_per_s"]  # not overwritten
    finally:
        torch.set_num_threads(old)


def test_the_oversubscribed_warning_is_one_plain_run_line_once(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """34.7: said as autotune's other run messages are (`warning: NAME: ...`, once a run), not as a Python warning
    with autotune's own file and line."""
    old = torch.get_num_threads()
    torch.set_num_threads(contention.cores())
    try:
        with busy(seconds=60, n=2 * contention.cores()), caplog.at_level(logging.WARNING), \
                warnings.catch_warnings(record=True) as raised:
            warnings.simplefilter("always")
            small = {**study_cfg(tmp_path, 2).to_dict(), "trainer": "tests.user_fits:fit"}  # an MLP on blobs
            study = autotune.run(config.from_dict(small)).study
    finally:
        torch.set_num_threads(old)
    flagged = [t.number for t in study.trials if "oversubscribed" in t.user_attrs]
    if not flagged:
        pytest.skip("no trial was found oversubscribed under the busy processes (nothing to say)")
    assert not [w for w in raised if "oversubscribed" in str(w.message)]  # no `.../_objective.py:123: UserWarning`
    said = [r.getMessage() for r in caplog.records if "oversubscribed" in r.getMessage()]
    assert len(said) == 1
    assert said[0].startswith(f"warning: tests.user_fits:fit: trial {flagged[0]} ran oversubscribed: ")
    assert "\n" not in said[0]


def busy_study(tmp_path: Path) -> config.RunConfig:
    return config.from_dict({**study_cfg(tmp_path, 1).to_dict(), "trainer": "tests.user_fits:fit"})  # MLP, blobs


def test_a_runs_first_trial_on_busy_cores_starts_with_the_threads_a_busy_trial_would_leave(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Busy cores before the run's first trial (real competing processes): it trains at the cap an oversubscribed
    trial would have left (half the threads), not at all of them (measured on 2 cores busy with 4 spinning
    processes: a first digits-CNN trial took 57-59 s at 2 threads, the later ones 0.4 s at 1; checked first, the
    first trial took 1.9-2.2 s at 1 thread); said once, the cap stored with the trial."""
    threads = contention.cores()
    if threads < 2:
        pytest.skip("one core: no fewer threads to start with")
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with busy(seconds=60, n=2 * threads), caplog.at_level(logging.WARNING):
            (first,) = autotune.run(busy_study(tmp_path)).study.trials
        assert torch.get_num_threads() == threads  # only inside the trial
    finally:
        torch.set_num_threads(old)
    assert first.user_attrs["cpu_threads_capped"] == threads // 2, first.user_attrs
    assert first.user_attrs["device"].endswith(f"{threads // 2} threads)")
    said = [r.getMessage() for r in caplog.records if "the cores are busy" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"warning: tests.user_fits:fit: the cores are busy: {threads} torch "
                                                 "threads waited for a core "), said
    assert said[0].endswith(f"trials start at {threads // 2} thread(s) (user attr cpu_threads_capped)")


def test_a_runs_first_trial_on_quiet_cores_keeps_every_thread(tmp_path: Path, quiet_cores: None) -> None:
    old = torch.get_num_threads()
    torch.set_num_threads(contention.cores())
    try:
        (first,) = autotune.run(busy_study(tmp_path)).study.trials
    finally:
        torch.set_num_threads(old)
    assert "cpu_threads_capped" not in first.user_attrs, first.user_attrs
