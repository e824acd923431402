"""Inside a rank of a several-device trial: its place in the process group (`Group`: the few collectives the trial
context needs, DDP around the model) and its share of every global batch (`ShardedBatches`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import nn


def backend_for(dev: torch.device) -> str:
    return "nccl" if dev.type == "cuda" else "gloo"


class Group:
    """This process's place in its trial's process group, and the few collectives the trial context needs."""

    def __init__(self, rank: int, world: int, device: torch.device) -> None:
        self.rank = rank
        self.world = world
        self.device = device  # where collective tensors live: this rank's GPU (NCCL) or the CPU (gloo)

    def sum(self, values: Sequence[float]) -> list[float]:
        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(t)
        return [float(v) for v in t.tolist()]

    def max(self, values: Sequence[float]) -> list[float]:
        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        return [float(v) for v in t.tolist()]

    def any(self, flags: Sequence[bool]) -> list[bool]:
        """Each flag set on any rank: every rank takes the same branch (an in-epoch stop at the same step)."""
        t = torch.tensor([int(f) for f in flags], dtype=torch.int32, device=self.device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        return [bool(v) for v in t.tolist()]

    def from_main(self, values: Sequence[int]) -> list[int]:
        """Rank 0's values on every rank (a stop decision)."""
        t = torch.tensor(list(values), dtype=torch.int64, device=self.device)
        torch.distributed.broadcast(t, src=0)
        return [int(v) for v in t.tolist()]

    def barrier(self) -> None:
        if self.device.type == "cuda":
            torch.distributed.barrier(device_ids=[self.device.index])
        else:
            torch.distributed.barrier()

    def wrap(self, model: nn.Module) -> nn.parallel.DistributedDataParallel:
        """DistributedDataParallel: rank 0's weights broadcast now, gradients averaged over the ranks each step.
        Buffers (BatchNorm's running statistics) are not broadcast before every forward, a collective per step
        saved: each rank keeps its own, and rank 0's (over its share of the data) are the ones evaluated and
        kept. Gradients live in DDP's buckets (no copy per step)."""
        import inspect

        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        # torch 2.13 renamed the switch (the old name warns); older releases know only the old one
        takes = inspect.signature(DistributedDataParallel).parameters
        sync = "forward_sync_buffers" if "forward_sync_buffers" in takes else "broadcast_buffers"
        return DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True, **{sync: False})


class ShardedBatches(torch.utils.data.Sampler[list[int]]):
    """One rank's share of every global batch. Every rank draws the same permutation of the n samples (a CPU
    generator seeded alike, so a new order each epoch and the same one on every rank), cuts it into global batches
    of `batch_size` and takes its near-equal contiguous part of each: the ranks of one step see disjoint samples
    that together are the global batch. Every rank has the same number of steps (DDP needs it): a last global
    batch smaller than the world is dropped, as is any short last batch with `drop_last`."""

    def __init__(self, n: int, batch_size: int, rank: int, world: int, seed: int, shuffle: bool,
                 drop_last: bool) -> None:
        self.n, self.batch_size, self.rank, self.world, self.shuffle = n, batch_size, rank, world, shuffle
        short = n % batch_size
        self.n_used = n - short if short and (drop_last or short < world) else n
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return -(-self.n_used // self.batch_size)

    def spans(self) -> list[tuple[int, int]]:
        """[start, stop) of this rank's part of each global batch, in positions of the epoch's order."""
        out = []
        for start in range(0, self.n_used, self.batch_size):
            m = min(self.batch_size, self.n_used - start)
            out.append((start + m * self.rank // self.world, start + m * (self.rank + 1) // self.world))
        return out

    def order(self) -> torch.Tensor:
        """The next epoch's order of the samples (identical on every rank)."""
        return torch.randperm(self.n, generator=self.gen) if self.shuffle else torch.arange(self.n)

    def __iter__(self) -> Iterator[list[int]]:
        order = self.order()
        for lo, hi in self.spans():
            yield order[lo:hi].tolist()
