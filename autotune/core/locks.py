"""Per-host file locks on a study: processes of one machine that share a study take turns at a job on it.

The lock file lives in the system's temporary folder, keyed by the study's name and storage, so two studies
(or one study in two storages) never wait on each other. It serialises processes of one host only; across
machines the storage's own transactions decide.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import optuna

from autotune.core import optuna_compat as compat


def storage_key(study: optuna.Study) -> str:
    """The storage's URL or file (what makes two handles the same study), or its repr."""
    storage = compat.storage_of(study)
    inner = compat.wrapped_storage(storage)  # RDBStorage sits in a _CachedStorage; journal: its backend
    if hasattr(inner, "url"):
        return str(inner.url)
    path = compat.journal_file_path(inner)
    return str(path) if path is not None else repr(storage)


@contextlib.contextmanager
def host_lock(study: optuna.Study, job: str) -> Iterator[None]:
    """Hold this host's lock for `job` (a short word: "stale", "plan") on this study."""
    with path_lock(f"{study.study_name}\0{storage_key(study)}", job):
        yield


@contextlib.contextmanager
def path_lock(name: str, job: str) -> Iterator[None]:
    """Hold this host's lock for `job` on `name` (a study's name and storage, a file's path)."""
    key = hashlib.sha1(name.encode()).hexdigest()
    path = Path(tempfile.gettempdir()) / f"autotune-{job}-{key[:16]}.lock"
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


__all__ = ["host_lock", "path_lock", "storage_key"]
