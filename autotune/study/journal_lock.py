"""The journal file's lock, with its owner written in it: a lock left by a dead process of this host is broken at
once, not after Optuna's 30-second grace period.

Optuna's `JournalFileSymlinkLock` (the default of `JournalFileBackend`) is a symlink `<journal>.lock` that points
at the journal; a process SIGKILLed while appending leaves it, and every other worker waits until the link has
been unchanged for `grace_period` (30 s) before removing it. Here the link points at its owner instead
(`autotune:host:pid:start:token`, created at once with its content, so it is never seen half-written), and a
waiter that finds the owner on this host provably gone (no such process, a zombie, or another process reusing
its pid: orphans.Owner.alive) removes it right away. A lock of a live process is never broken; one of another
host (whose processes cannot be seen from here) or of plain Optuna (a link to the journal) falls back to the
grace period. Breaking is serialised between the processes of this host (locks.path_lock), so two waiters
never both remove a lock and then each other's: under it, the link is read again and removed only if it still
names the dead owner.

`JournalFile` is the journal itself (Optuna's `JournalFileBackend` with this lock): a record is appended whole or
not at all. A write cut short (a full disk, a quota) is cut back off under the lock at once, and a cut-off tail
left by a process that died mid-write is removed under the lock on open and before every append, so the next
record never lands on a half line (which would make every later read fail with a JSONDecodeError). Read-only
(`writable=False`: report, best, dashboard) it takes no lock, creates nothing and refuses every append; Optuna's
reader already skips a last line without its newline.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
import uuid
from typing import Any

from optuna.logging import get_logger
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

from autotune.core import locks
from autotune.study.orphans import Owner, owner_id

PREFIX = "autotune:"
GRACE_S = 30.0  # Optuna's grace period for a lock whose owner cannot be checked
MAX_SLEEP_S = 0.05  # polling cap while waiting: a freed or dead lock is taken within this
_logger = get_logger(__name__)


def owner_of(stamp: str) -> Owner | None:
    """The process named by a lock's link (None: not autotune's, e.g. plain Optuna's link to the journal)."""
    if not stamp.startswith(PREFIX):
        return None
    return Owner.parse(stamp[len(PREFIX):].rpartition(":")[0])  # host:pid:start, without the token


def dead_here(stamp: str) -> bool:
    o = owner_of(stamp)
    return o is not None and o.here() and not o.alive()


class OwnedJournalLock(JournalFileSymlinkLock):
    """`JournalFileBackend(path, lock_obj=OwnedJournalLock(path))`: exclusive between processes (and with plain
    Optuna's symlink lock, which uses the same `<path>.lock` name). A JournalFileSymlinkLock (the public type
    `lock_obj` takes; its base class is private to Optuna) with its own acquire and release."""

    def __init__(self, file_path: str, grace_period: float = GRACE_S) -> None:
        super().__init__(file_path, grace_period=max(3, int(grace_period)))
        self.lock_file = file_path + ".lock"
        self.grace_s = grace_period  # (the base's grace_period is its whole seconds, at least 3)
        self._stamp: str | None = None

    def acquire(self) -> bool:
        stamp = f"{PREFIX}{owner_id()}:{uuid.uuid4().hex}"
        sleep = 0.001
        seen: tuple[str, float] | None = None  # (the link we wait on, since when)
        while True:
            try:
                os.symlink(stamp, self.lock_file)
                self._stamp = stamp
                return True
            except FileExistsError:
                pass
            held = _read(self.lock_file)
            if held is None:
                continue  # released just now: try again at once
            if seen is None or seen[0] != held:
                seen = (held, time.monotonic())
            if dead_here(held) or time.monotonic() - seen[1] > self.grace_s:
                self._break(held)
                sleep = 0.001
                continue
            time.sleep(sleep)
            sleep = min(2 * sleep, MAX_SLEEP_S)

    def _break(self, held: str) -> None:
        """Remove the lock if it still is `held` (read again under this host's lock: another waiter may have
        broken it and taken the lock since)."""
        with locks.path_lock(os.path.abspath(self.lock_file), "break"):
            if _read(self.lock_file) == held:
                _logger.warning(f"{self.lock_file}: removed the journal lock of " +
                                (f"process {held[len(PREFIX):].rpartition(':')[0]}, which is gone"
                                 if dead_here(held) else f"{held or 'a lock file'}, unchanged for "
                                                         f"{self.grace_s:g}s"))
                os.unlink(self.lock_file)

    def release(self) -> None:
        stamp, self._stamp = self._stamp, None
        if stamp is not None and _read(self.lock_file) == stamp:
            os.unlink(self.lock_file)
        else:  # what was written is written; the next append waits on whoever holds the lock now
            _logger.warning(f"{self.lock_file}: this process's journal lock was broken while it held it")


class JournalFile(JournalFileBackend):
    """The journal at `path`, locked by `OwnedJournalLock`; records are written whole (see the module's doc).
    `read_only`: opening an existing journal writes nothing (no lock taken, no tail cut): a read-only command on a
    read-only mount; an append, should one come, still takes the lock and cuts first."""

    def __init__(self, path: str, read_only: bool = False) -> None:
        self.path = path
        self.owned_lock = OwnedJournalLock(path)
        super().__init__(path, lock_obj=self.owned_lock)  # (creates a missing file)
        if not read_only:
            self.owned_lock.acquire()
            try:
                self._cut_tail()
            finally:
                self.owned_lock.release()

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode("utf-8")
        self.owned_lock.acquire()
        try:
            self._cut_tail()
            with open(self.path, "ab", buffering=0) as f:  # unbuffered: nothing left to flush on failure
                start = f.seek(0, os.SEEK_END)
                try:
                    view = memoryview(data)
                    while view:
                        n = f.write(view)
                        if not n:  # (a regular file either takes bytes or raises; never spin)
                            raise OSError(errno.EIO, "the journal took no bytes", self.path)
                        view = view[n:]
                    os.fsync(f.fileno())
                except BaseException:
                    with contextlib.suppress(OSError):  # (the write's own error is the one to tell)
                        os.ftruncate(f.fileno(), start)  # never part of a record (freeing blocks works on a full disk)
                    raise
        finally:
            self.owned_lock.release()

    def _cut_tail(self) -> None:
        """Remove a last line without its newline (a record whose write never finished); the caller holds the
        lock, so no live writer is mid-record."""
        with open(self.path, "rb+") as f:
            end = f.seek(0, os.SEEK_END)
            if end == 0:
                return
            f.seek(end - 1)
            if f.read(1) == b"\n":
                return
            keep = end
            while keep > 0:  # back to the last newline, a block at a time
                step = min(keep, 1 << 16)
                f.seek(keep - step)
                at = f.read(step).rfind(b"\n")
                if at >= 0:
                    keep = keep - step + at + 1
                    break
                keep -= step
            f.truncate(keep)
        _logger.warning(f"{self.path}: removed a record cut off at its end ({end - keep} bytes, a write that "
                        f"did not finish)")


def _read(lock_file: str) -> str | None:
    """What the lock names ("" for a plain file: another lock scheme's); None: there is no lock."""
    try:
        return os.readlink(lock_file)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.EINVAL:  # not a symlink
            return ""
        raise


__all__ = ["JournalFile", "OwnedJournalLock", "dead_here", "owner_of"]
