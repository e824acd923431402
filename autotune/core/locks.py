"""Per-host file locks: processes of one machine that share a study take turns at a job on it.

A lock file is keyed by the study's name and storage (or another name), so two studies (or one study in two
storages) never wait on each other. It serialises processes of one host only; across machines the storage's own
transactions decide.

The files live in a directory only this user can write (`lock_dir`: $XDG_RUNTIME_DIR/autotune where the session
has one, else <tmp>/autotune-<uid>, mode 0700), never in the shared temporary folder itself: there another user
could plant a file or a symlink at a predictable name and make a root-run autotune open (create, truncate) a file
of their choosing, or hold our lock. A lock file is opened without following a symlink, and a directory that is
a symlink, someone else's, writable by others or not by us is refused in one line naming it and the fix.
"""

from __future__ import annotations

import contextlib
import errno
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


FIX = "remove it (as its owner, or root), or point XDG_RUNTIME_DIR or TMPDIR at a directory of your own"


def _unsafe(path: Path) -> str | None:
    """Why `path` is no directory for this user's lock files (None: it is one: a real directory of this user's, that
    nobody else may write to and this user can)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.getuid():
        return f"belongs to {_user(st.st_uid)}, not to you ({_user(os.getuid())})"
    if st.st_mode & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"is not writable by you (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _user(uid: int) -> str:
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def lock_dir() -> Path:
    """This user's directory for lock files (created 0700 on first use); an unsafe or unusable one is an
    AutotuneError in one line naming it and the fix (never a raw OSError from every lock)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _unsafe(Path(runtime)) is None:  # (one we cannot write: the temporary folder instead)
        path = Path(runtime) / "autotune"
    else:
        path = Path(tempfile.gettempdir()) / f"autotune-{os.getuid()}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise AutotuneError(f"cannot create the lock directory {path}: {e.strerror or e}; {FIX}") from None
    problem = _unsafe(path)
    if problem is not None:
        raise AutotuneError(f"the lock directory {path} {problem}, so autotune cannot take its locks there; {FIX}")
    return path


def _lock_file(name: str, job: str) -> Path:
    key = hashlib.sha1(name.encode()).hexdigest()
    return lock_dir() / f"{job}-{key[:16]}.lock"


def _open(path: Path) -> int:
    """The lock file, created 0600, never through a symlink (O_NOFOLLOW: a planted link is an error here)."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        why = "a symlink there is refused" if e.errno == errno.ELOOP else _owner_of(path)
        raise AutotuneError(f"cannot open the lock file {path}: {e.strerror or e} ({why}); remove it (as its owner, "
                            "or root), or point XDG_RUNTIME_DIR or TMPDIR at a directory of your own") from None


def _owner_of(path: Path) -> str:
    try:
        return f"it belongs to {_user(os.lstat(path).st_uid)}"
    except OSError:
        return "its directory is not writable"


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
