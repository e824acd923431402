"""One process of this host at a time for one study: a file lock in the temp folder, keyed by the study's name
and its storage, so processes sharing a study (workers, `autotune run` twice) take turns where they must."""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import optuna


@contextlib.contextmanager
def study_lock(study: optuna.Study, purpose: str) -> Iterator[None]:
    """Hold the host-wide lock `purpose` of this study (e.g. "stale": failing dead trials, "plan": the search
    plan) for the block; other processes of this host wait for it."""
    import fcntl

    key = hashlib.sha1(f"{study.study_name}\0{_storage_key(study)}".encode()).hexdigest()
    path = Path(tempfile.gettempdir()) / f"autotune-{purpose}-{key[:16]}.lock"
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _storage_key(study: optuna.Study) -> str:
    inner = getattr(study._storage, "_backend", None)  # RDBStorage sits in a _CachedStorage; journal: its backend
    for attr in ("url", "_file_path"):
        if hasattr(inner, attr):
            return str(getattr(inner, attr))
    return repr(study._storage)
