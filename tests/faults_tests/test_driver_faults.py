"""Faults around the `--workers` driver: a supervisor (systemd, Kubernetes, a batch system) ends `autotune run
--workers N` with SIGTERM mid-study. A real driver process, its real spawned workers, a real signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.study import workers

ROOT = Path(__file__).resolve().parents[2]


def _study(log: Path) -> optuna.Study | None:
    if not log.exists():
        return None
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(log)))
    try:
        return optuna.load_study(study_name="w", storage=storage)
    except KeyError:
        return None


def _gone(pid: int) -> bool:
    """The process ended (a zombie no one has reaped yet counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], Path, list[optuna.trial.FrozenTrial]]:
    """A driver (`autotune ARGS w.yaml ...`) on a slow two-worker study, once both workers are training."""
    log = tmp_path / "w.log"
    run_file = tmp_path / "w.yaml"
    run_file.write_text(f"study: {{name: w, storage: 'journal:///{log}', n_trials: 6}}\n"
                        "trainer: tests.user_fits:fit_sleepy\n"
                        "train: {epochs: 200, batch_size: 64, user.sleep_ms: 20}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    driver = subprocess.Popen([sys.executable, "-m", "autotune", args[0], str(run_file), *args[1:]], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    running: list[optuna.trial.FrozenTrial] = []
    while time.monotonic() < deadline and driver.poll() is None:
        study = _study(log)
        running = [t for t in study.get_trials() if t.state == TrialState.RUNNING] if study else []
        if len(running) == 2:  # both workers are training
            break
        time.sleep(0.5)
    if len(running) != 2:
        driver.kill()
        raise AssertionError(driver.communicate(timeout=30))
    return driver, log, running


def _terminate(driver: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        driver.send_signal(signal.SIGTERM)
        return driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()


def _owners(running: list[optuna.trial.FrozenTrial]) -> list[int]:
    return sorted(int(t.user_attrs[workers.WORKER_ATTR].split(":")[1]) for t in running)


def _nothing_left_running(log: Path) -> None:
    study = _study(log)
    assert study is not None
    assert not [t for t in study.get_trials() if t.state == TrialState.RUNNING]  # stopped trials are recorded


@pytest.mark.slow  # (7-14 s of real processes: the default run stays under 10 minutes)
def test_sigterm_to_the_workers_driver_says_what_stopped_and_ends_its_workers(tmp_path: Path) -> None:
    """Today the driver died on SIGTERM's default action: no line at all, exit -15, its workers left to the
    parent-death signal. Now: one line naming the workers and trials it stopped, that the study is kept and how to
    resume; exit 143; every worker ended, no trial left RUNNING."""
    driver, log, running = _start(tmp_path, "run", "--workers", "2", "--plain")
    pids = _owners(running)
    _, err = _terminate(driver)
    assert driver.returncode == 143, (driver.returncode, err)
    lines = [ln for ln in err.splitlines() if ln.startswith("terminated")]
    assert len(lines) == 1, err
    line = lines[0]
    numbers = sorted(t.number for t in running)
    assert f"stopped 2 worker(s) and their running trial(s) {numbers[0]}, {numbers[1]}" in line, line
    assert f"journal:///{log}" in line and "run the same command again to resume" in line, line
    assert "Traceback" not in err, err
    assert all(_gone(pid) for pid in pids), pids
    _nothing_left_running(log)


@pytest.mark.slow  # (~35 s; the run --workers test above covers the driver's rule by default)
def test_sigterm_to_a_waiting_local_launcher_ends_its_jobs_in_one_line(tmp_path: Path) -> None:
    """`autotune launch --executor local --wait`: today SIGTERM killed the launcher silently and left its two local
    jobs training on as orphans. Now it ends them (their trials recorded, retried on resume) and says so."""
    pytest.importorskip("submitit")
    driver, log, running = _start(tmp_path, "launch", "--executor", "local", "--workers", "2", "--logs",
                                  str(tmp_path / "logs"), "--wait")
    pids = _owners(running)
    out, err = _terminate(driver)
    assert driver.returncode == 143, (driver.returncode, out, err)
    lines = [ln for ln in err.splitlines() if ln.startswith("terminated")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("terminated: ended 2 local job(s) (") and "run the same command again to resume" \
        in lines[0], lines[0]
    deadline = time.monotonic() + 30
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(_gone(pid) for pid in pids), pids
    _nothing_left_running(log)
