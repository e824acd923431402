"""Several devices per trial: the trial's side (devices.py: how many devices, `check`, `launch`), the supervisor of
its rank processes (supervisor.py), and a rank's place in the process group (group.py: `Group`)."""

from __future__ import annotations

from autotune.training.distributed.devices import check, cpu_cores, devices_wanted
from autotune.training.distributed.group import Group, ShardedBatches
from autotune.training.distributed.supervisor import RankFailed, launch

__all__ = ["Group", "RankFailed", "ShardedBatches", "check", "cpu_cores", "devices_wanted", "launch"]
