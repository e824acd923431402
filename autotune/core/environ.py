"""Environment variables set for one block and put back after it: a spawned worker's GPU and thread
variables, MLflow's HTTP retry settings."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def setenv(values: dict[str, str]) -> Iterator[None]:
    """Set `values` in os.environ inside the block; afterwards each variable is back to what it was, or unset.
    (A spawned child inherits os.environ at start: this sets its variables just for that moment.)"""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
