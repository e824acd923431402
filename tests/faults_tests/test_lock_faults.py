"""Faults in the host's lock folder: one planted by another user, or one that is ours but not writable, and a runtime
folder we cannot write. Each lock then fails in one line naming the folder and the fix, never a raw OSError. Real
folders with real owners and modes, and a real process that cannot override file permissions (as root, run without
CAP_DAC_OVERRIDE through setpriv)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TAKE = """
from autotune.core import AutotuneError, locks
try:
    with locks.path_lock("x", "job"):
        print("locked in", locks.lock_dir())
except AutotuneError as e:
    print("error:", e)
"""


def take_a_lock(tmp: Path, runtime: Path | None = None) -> str:
    """Take a lock in a process that obeys file modes like any user's (root without its override capability)."""
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env.update(PYTHONPATH=str(ROOT), TMPDIR=str(tmp))
    if runtime is not None:
        env["XDG_RUNTIME_DIR"] = str(runtime)
    cmd = [sys.executable, "-c", TAKE]
    if os.getuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv: cannot run a process that obeys file modes")
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *cmd]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr  # (no traceback: today, a raw PermissionError)
    return r.stdout.strip()


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    t = tmp_path / "tmp"
    t.mkdir(mode=0o1777)
    t.chmod(0o1777)
    return t


def test_a_lock_folder_planted_by_another_user_is_one_line_naming_it_and_the_fix(tmp: Path) -> None:
    planted = tmp / f"autotune-{os.getuid()}"
    planted.mkdir(mode=0o700)
    other = 65534 if os.getuid() != 65534 else 65533
    if os.getuid() != 0:
        pytest.skip("planting a folder as another user needs root")
    os.chown(planted, other, -1)
    out = take_a_lock(tmp)
    assert out.startswith(f"error: the lock directory {planted} belongs to ") and f"(uid {other}), not to you" in out
    assert "remove it (as its owner, or root), or point XDG_RUNTIME_DIR or TMPDIR at a directory of your own" in out


def test_our_own_lock_folder_that_we_cannot_write_is_one_line_naming_it(tmp: Path) -> None:
    """Today: `cannot open the lock file ...: Permission denied (a symlink there is refused)`: a symlink blamed, the
    folder not named as the problem, no fix."""
    mine = tmp / f"autotune-{os.getuid()}"
    mine.mkdir(mode=0o500)
    mine.chmod(0o500)
    out = take_a_lock(tmp)
    assert out == f"error: the lock directory {mine} is not writable by you (mode 0500), so autotune cannot take " \
                  "its locks there; remove it (as its owner, or root), or point XDG_RUNTIME_DIR or TMPDIR at a " \
                  "directory of your own"


def test_a_runtime_folder_we_cannot_write_falls_back_to_the_temporary_folder(tmp: Path, tmp_path: Path) -> None:
    """Today: every lock raised a raw `PermissionError: [Errno 13] Permission denied: '.../run/autotune'`."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o500)
    runtime.chmod(0o500)
    out = take_a_lock(tmp, runtime)
    assert out == f"locked in {tmp / f'autotune-{os.getuid()}'}"
