"""The bottom layer: error types and their one-line texts, the metric catalogue, references to a user's code
(`module:function`, paths next to the run file), the version. Standard library only: everything imports it.

`_contention` (CPU oversubscription), `_environ`, `_lifetime`, `_locks` and `_lazy` are reached as modules.
"""

from __future__ import annotations

from autotune.core._errors import (
    STOP_REASONS,
    AutotuneError,
    ConfigError,
    TrialStopped,
    describe_exception,
    one_of,
    redact,
    suggest,
    user_where,
)
from autotune.core._metrics import CATALOGUE, CLOCKS, DIRECTIONS, INFERENCE, PER_EPOCH, REPORTED, is_quality, per_epoch
from autotune.core._userref import check_fit_signature, load_factory, resolve_path
from autotune.core._version import __version__

__all__ = ["CATALOGUE", "CLOCKS", "DIRECTIONS", "INFERENCE", "PER_EPOCH", "REPORTED", "STOP_REASONS", "AutotuneError",
           "ConfigError", "TrialStopped", "__version__", "check_fit_signature", "describe_exception", "is_quality",
           "load_factory", "one_of", "per_epoch", "redact", "resolve_path", "suggest", "user_where"]
