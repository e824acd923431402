"""locks.host_lock: processes of one host take turns on one study; other studies and jobs do not wait."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.core import AutotuneError, locks

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


# ---------------------------------------------------------------- where lock files live: this user's own directory


def test_lock_files_live_in_a_directory_only_this_user_can_write(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the shared /tmp, here
    with locks.path_lock("study\0sqlite:///x.db", "stale"):
        pass
    assert not list(tmp_path.glob("*.lock"))  # nothing at a predictable name in the shared folder itself
    (d,) = tmp_path.iterdir()
    assert d.name == f"autotune-{os.getuid()}" and stat.S_IMODE(d.stat().st_mode) == 0o700
    (f,) = d.iterdir()
    assert f.name.startswith("stale-") and stat.S_IMODE(f.stat().st_mode) == 0o600


def test_a_planted_symlink_is_never_followed(tmp_path: Path, monkeypatch: Any) -> None:
    """Someone plants a link where our lock file will be: opening it must not create (or truncate) its target."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    target = tmp_path / "victim"
    with locks.path_lock("s", "stale"):
        pass
    (lock,) = (tmp_path / "run" / "autotune").iterdir()
    lock.unlink()
    lock.symlink_to(target)
    with pytest.raises(AutotuneError, match="cannot open the lock file .*a symlink there is refused"):
        with locks.path_lock("s", "stale"):
            pass
    assert not target.exists()


@pytest.mark.parametrize("how", ["symlink", "group_writable"])
def test_an_unsafe_lock_directory_is_refused(tmp_path: Path, monkeypatch: Any, how: str) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    d = tmp_path / f"autotune-{os.getuid()}"
    if how == "symlink":  # another user's directory, behind a link at our name
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        d.symlink_to(tmp_path / "elsewhere")
    else:
        d.mkdir()
        d.chmod(0o777)
    problem = "is a symlink" if how == "symlink" else r"is writable by others \(mode 0777\)"
    with pytest.raises(AutotuneError, match=f"the lock directory {d} {problem}, so autotune cannot take its locks "
                                            "there; remove it"):
        locks.lock_dir()
