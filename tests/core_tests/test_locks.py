"""locks.host_lock: processes of one host take turns on one study; other studies and jobs do not wait."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import optuna

from autotune.core import locks

HOLD = """
import sys, time, optuna
from autotune.core import locks
storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(sys.argv[1]))
study = optuna.load_study(study_name=sys.argv[2], storage=storage)
with locks.host_lock(study, "test"):
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
"""


def test_a_second_process_waits_for_the_lock(tmp_path: Path) -> None:
    log = str(tmp_path / "j.log")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(log))
    study = optuna.create_study(study_name="a", storage=storage)
    other = optuna.create_study(study_name="b", storage=storage)
    root = str(Path(__file__).resolve().parents[2])
    holder = subprocess.Popen([sys.executable, "-c", HOLD, log, "a", "5"], cwd=root, text=True,
                              stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with locks.host_lock(other, "test"), locks.host_lock(study, "another"):
            assert time.monotonic() - t0 < 1.0  # another study, another job: no wait
        with locks.host_lock(study, "test"):
            waited = time.monotonic() - t0
        assert waited > 1.0, waited  # it had to wait for the holder (5 s) to let go
    finally:
        holder.wait(timeout=60)
