"""The journal file's lock: a lock left by a SIGKILLed process of this host is broken at once; a live holder's
lock never is; one that cannot be checked (another host, plain Optuna's) waits out the grace period."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

from autotune.study import journal_lock
from autotune.study.journal_lock import OwnedJournalLock
from tests.support import hold_in_child

ROOT = Path(__file__).resolve().parents[2]
def test_a_killed_holders_lock_is_broken_at_once_a_live_holders_never(tmp_path: Path) -> None:
    path = tmp_path / "j.log"
    child = hold_in_child(path)
    assert journal_lock.owner_of(os.readlink(f"{path}.lock")).pid == child.pid  # type: ignore[union-attr]
    got = threading.Event()
    waiter = threading.Thread(target=lambda: OwnedJournalLock(str(path), grace_period=60).acquire() and got.set(),
                              daemon=True)
    try:
        waiter.start()
        assert not got.wait(1.5)  # the holder is alive: its lock stands
        assert os.path.islink(f"{path}.lock")
        killed = time.monotonic()
        child.send_signal(signal.SIGKILL)  # not reaped yet: a zombie counts as gone
        assert got.wait(3.0), "the dead holder's lock was not broken within 3 s"
        assert time.monotonic() - killed < 3.0
        owner = journal_lock.owner_of(os.readlink(f"{path}.lock"))
        assert owner is not None and owner.is_me()  # this process holds it now
    finally:
        child.kill()
        child.wait()


def test_locks_that_cannot_be_checked_wait_out_the_grace_period(tmp_path: Path) -> None:
    """Another host's process (its pid means nothing here) or plain Optuna's link to the journal."""
    for held in (f"autotune:not-{socket.gethostname()}:1:1:token", str(tmp_path / "j.log")):
        lock = OwnedJournalLock(str(tmp_path / "j.log"), grace_period=1.0)
        os.symlink(held, lock.lock_file)
        t0 = time.monotonic()
        assert lock.acquire()
        assert 1.0 <= time.monotonic() - t0 < 3.0
        lock.release()
        assert not os.path.lexists(lock.lock_file)


def test_release_leaves_a_lock_that_is_not_its_own(tmp_path: Path) -> None:
    lock = OwnedJournalLock(str(tmp_path / "j.log"))
    assert lock.acquire()
    os.unlink(lock.lock_file)
    os.symlink("autotune:elsewhere:7:7:other", lock.lock_file)  # broken and taken by another host meanwhile
    lock.release()
    assert os.readlink(lock.lock_file) == "autotune:elsewhere:7:7:other"
