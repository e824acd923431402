"""Targets for `distributed.launch` itself (no trainer): a rank's order of events the launcher must read right."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from autotune.training.distributed.group import Group


def consequence_before_cause(payload: Any, group: Group, on_epoch: Any, on_record: Any) -> None:
    """Rank 0 reports a lost connection at once and rank 1 dies by SIGKILL a moment later: the order in which a
    real peer's death can reach the launcher (the survivor's socket closes before the dead rank is reaped)."""
    if group.rank == 0:
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1")
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)
