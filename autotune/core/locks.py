"""Per-host file locks: processes of one machine that share a study take turns at a job on it.

A lock file is keyed by the study's name and storage (or another name), so two studies (or one study in two
storages) never wait on each other. It serialises processes of one host only; across machines the storage's own
transactions decide.

The files live in a directory only this user can write (`lock_dir`: $XDG_RUNTIME_DIR/autotune where the session
has one, else <tmp>/autotune-<uid>, mode 0700), never in the shared temporary folder itself: there another user
could plant a file or a symlink at a predictable name and make a root-run autotune open (create, truncate) a file
of their choosing, or hold our lock. A lock file is opened without following a symlink, and a directory that is
a symlink, someone else's, or writable by others is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.core.errors import AutotuneError

if TYPE_CHECKING:
    import optuna


def storage_key(study: optuna.Study) -> str:
    """The storage's URL or file (what makes two handles the same study), or its repr."""
    from autotune.core import optuna_compat as compat  # (here: the watchdog's claims need no Optuna)

    storage = compat.storage_of(study)
    inner = compat.wrapped_storage(storage)  # RDBStorage sits in a _CachedStorage; journal: its backend
    if hasattr(inner, "url"):
        return str(inner.url)
    path = compat.journal_file_path(inner)
    return str(path) if path is not None else repr(storage)


def _safe_dir(path: Path) -> bool:
    """A real directory (not a symlink) of this user's, that nobody else may write to."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def lock_dir() -> Path:
    """This user's directory for lock files (created 0700 on first use); an unsafe one is an AutotuneError."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _safe_dir(Path(runtime)):
        path = Path(runtime) / "autotune"
    else:
        path = Path(tempfile.gettempdir()) / f"autotune-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    if not _safe_dir(path):
        raise AutotuneError(f"the lock directory {path} is not safe to use (a symlink, another user's, or writable "
                            "by others): remove it, or set XDG_RUNTIME_DIR to a directory of your own")
    return path


def _lock_file(name: str, job: str) -> Path:
    key = hashlib.sha1(name.encode()).hexdigest()
    return lock_dir() / f"{job}-{key[:16]}.lock"


def _open(path: Path) -> int:
    """The lock file, created 0600, never through a symlink (O_NOFOLLOW: a planted link is an error here)."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise AutotuneError(f"cannot open the lock file {path}: {e.strerror or e} (a symlink there is refused)") \
            from None


@contextlib.contextmanager
def host_lock(study: optuna.Study, job: str) -> Iterator[None]:
    """Hold this host's lock for `job` (a short word: "stale", "plan") on this study."""
    with path_lock(f"{study.study_name}\0{storage_key(study)}", job):
        yield


@contextlib.contextmanager
def path_lock(name: str, job: str) -> Iterator[None]:
    """Hold this host's lock for `job` on `name` (a study's name and storage, a file's path), waiting for it."""
    fd = _open(_lock_file(name, job))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (releases the lock)


class Claim:
    """A lock taken without waiting (`try_claim`); held until `release()` (or the process ends)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def try_claim(name: str, job: str) -> Claim | None:
    """This host's lock for `job` on `name` if no other process (or open claim) holds it now, else None: for the one
    of several workers that acts on something they all see (the host's memory running short)."""
    fd = _open(_lock_file(name, job))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return Claim(fd)


__all__ = ["Claim", "host_lock", "lock_dir", "path_lock", "storage_key", "try_claim"]
