"""What the ranks of one trial agree on, behind one object: `Alone` (one process: every call a no-op) or
`Ranks` (several devices, a `distributed.Group`): the clock read after a barrier, samples, losses and energy summed,
the peak memory's maximum (GPUs; the sum on CPU ranks, which share one host's memory), in-epoch stops any rank saw,
rank 0's verdict on every rank, DDP around the model, this rank's batches.

The trial context calls these unconditionally; one process pays a plain method call, never a collective.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from autotune.core import STOP_REASONS, TrialStopped
from autotune.training import accel
from autotune.training.context.misuse import ContextMisuse
from autotune.training.distributed.devices import Group, ShardedBatches


class Alone:
    """A trial in one process: its own clocks and counts are the trial's, its verdicts final."""

    rank = 0
    world = 1
    alone = True  # the hang limit is checked where it happens (several devices: at the agreed steps)

    def clock(self, dev: torch.device) -> float:
        return accel.clock(dev)

    def sum(self, values: Sequence[float]) -> Sequence[float]:
        return values

    def max(self, values: Sequence[float]) -> Sequence[float]:
        return values

    def any(self, flags: Sequence[bool]) -> Sequence[bool]:
        return flags

    def decision(self, stop: TrialStopped | None,
                 stopped_early_at: int | None) -> tuple[TrialStopped | None, int | None]:
        return stop, stopped_early_at

    def wrap(self, model: nn.Module) -> nn.parallel.DistributedDataParallel | None:
        """The model's DistributedDataParallel wrapper (None: one process trains the model itself)."""
        return None

    def shard(self, n: Callable[[], int], iterable: bool, bs: int, seed: int, shuffle: bool,
              drop_last: bool) -> ShardedBatches | None:
        """This rank's part of every global batch of a training loader (None: all of it)."""
        return None


class Ranks(Alone):
    """One rank of a trial on several devices: rank 0 alone decides, every rank learns it at the same point."""

    alone = False

    def __init__(self, group: Group) -> None:
        self.group = group
        self.rank = group.rank
        self.world = group.world

    def clock(self, dev: torch.device) -> float:
        """The clock once every rank got here (the slowest rank's time)."""
        self.group.barrier()
        return accel.clock(dev)

    def sum(self, values: Sequence[float]) -> Sequence[float]:
        return self.group.sum(values)

    def max(self, values: Sequence[float]) -> Sequence[float]:
        return self.group.max(values)

    def any(self, flags: Sequence[bool]) -> Sequence[bool]:
        return self.group.any(flags)

    def decision(self, stop: TrialStopped | None,
                 stopped_early_at: int | None) -> tuple[TrialStopped | None, int | None]:
        """Rank 0's verdict on every rank: go on, stop early (the trial completes), or stop with rank 0's reason."""
        code = [0, 0, 0]
        if self.rank == 0 and stop is not None:
            code = [2, STOP_REASONS.index(stop.reason), stop.epoch]
        elif self.rank == 0 and stopped_early_at is not None:
            code = [1, 0, stopped_early_at]
        kind, reason, epoch = self.group.from_main(code)
        if kind == 1:
            stopped_early_at = epoch
        if kind == 2 and stop is None:
            stop = TrialStopped(STOP_REASONS[reason], epoch, "decided on rank 0")
        return stop, stopped_early_at

    def wrap(self, model: nn.Module) -> nn.parallel.DistributedDataParallel:
        return self.group.wrap(model)  # weights broadcast from rank 0 here; gradients averaged every step

    def shard(self, n: Callable[[], int], iterable: bool, bs: int, seed: int, shuffle: bool,
              drop_last: bool) -> ShardedBatches:
        if iterable:
            raise ContextMisuse(f"ctx.loader: an IterableDataset cannot be split over devices {self.world}: the "
                                "ranks must see the same number of batches; give a map-style Dataset or tensors")
        size = n()
        if bs < self.world:
            raise ContextMisuse(f"ctx.loader: batch_size {bs} cannot be split over devices {self.world}")
        return ShardedBatches(size, bs, self.rank, self.world, seed, shuffle, drop_last)


def collective(group: Group | None) -> Alone:
    """The collective of a trial: `Ranks` over its group, else the no-op one."""
    return Alone() if group is None else Ranks(group)


__all__ = ["Alone", "Ranks", "collective"]
