"""What both framework adapters share besides the trial context's port (training/context/port.py, which their
callbacks drive) and their tables (tables.py): the extra a framework needs, and a trial without the frameworks'
per-trial chatter.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from autotune.core import ADAPTER, ConfigError
from autotune.spec import SETTINGS

# Informational lines each framework prints per trial (device summary, tips, "max_epochs reached"): autotune prints
# one line per trial. Warnings stay (Lightning's "fp16 is not supported on CPU, using bf16" matters).
CHATTY_LOGGERS = ("lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric")
# Deprecations inside a framework's own code, about torch's API: nothing a user can act on.
FRAMEWORK_DEPRECATIONS = (r"`isinstance\(treespec, LeafSpec\)` is deprecated",)


def require(module: str, extra: str, framework: str) -> None:
    """`module` imports, else one line naming the extra to install (exit 2, no traceback)."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ConfigError(None, "trainer", f"the {framework} integration needs {module}: "
                                           f"pip install 'autotune[{extra}]'")


@contextlib.contextmanager
def quiet_frameworks() -> Iterator[None]:
    """Around one trial's framework training: its informational log lines off, its internal deprecation warnings
    dropped; every logger level and the warnings filters restored after (they are process-wide state)."""
    loggers = [logging.getLogger(name) for name in CHATTY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        if lg.getEffectiveLevel() < logging.WARNING:
            lg.setLevel(logging.WARNING)
    hf = sys.modules.get("transformers.utils.logging")  # (its progress bars: saving a checkpoint draws one)
    bars = hf is not None and hf.is_progress_bar_enabled()
    if bars:
        hf.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            for message in FRAMEWORK_DEPRECATIONS:
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if bars:
            hf.enable_progress_bar()


def record_cannot(port: Any, table: Any) -> None:
    """Each chosen setting the framework cannot apply (validation refuses them; a trial reached another way records
    them): not applied, with the table's reason."""
    for key in port.applied.unread_choices():
        if key in SETTINGS and table.role(key)[0] == "cannot":
            port.applied.cannot(key, table.role(key)[1], chosen_only=True)


__all__ = ["ADAPTER", "quiet_frameworks", "record_cannot", "require"]
