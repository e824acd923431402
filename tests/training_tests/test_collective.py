"""The collective of a trial: a no-op in one process; over a group, rank 0's verdict reaches every rank."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from torch import nn

from autotune.core.errors import TrialStopped
from autotune.training.context.collective import Alone, Ranks, collective
from autotune.training.context.misuse import ContextMisuse


def test_alone_is_a_no_op() -> None:
    c = collective(None)
    assert isinstance(c, Alone) and c.alone and (c.rank, c.world) == (0, 1)
    assert c.sum([3.0, 1.5]) == [3.0, 1.5] and c.any([True, False]) == [True, False]
    stop = TrialStopped("slow", 2, "x")
    assert c.decision(stop, None) == (stop, None) and c.decision(None, 3) == (None, 3)
    assert c.wrap(nn.Linear(2, 2)) is None
    assert c.shard(lambda: 1 / 0, True, 1, 0, True, False) is None  # the length is never asked for
    assert c.clock(torch.device("cpu")) > 0


class FakeGroup:
    """Rank 1 of 2: rank 0's broadcast is `main`."""

    rank, world = 1, 2

    def __init__(self, main: Sequence[int]) -> None:
        self.main = list(main)
        self.barriers = 0

    def from_main(self, values: Sequence[int]) -> list[int]:
        return self.main

    def barrier(self) -> None:
        self.barriers += 1


def test_a_rank_learns_rank_0s_stop_and_early_stop() -> None:
    stop, early = Ranks(FakeGroup([2, 1, 3])).decision(None, None)  # type: ignore[arg-type]
    assert isinstance(stop, TrialStopped) and stop.epoch == 3 and stop.detail == "decided on rank 0"
    assert Ranks(FakeGroup([1, 0, 4])).decision(None, None) == (None, 4)  # type: ignore[arg-type]
    assert Ranks(FakeGroup([0, 0, 0])).decision(None, None) == (None, None)  # type: ignore[arg-type]


def test_a_rank_reads_the_clock_after_a_barrier() -> None:
    g = FakeGroup([0, 0, 0])
    Ranks(g).clock(torch.device("cpu"))  # type: ignore[arg-type]
    assert g.barriers == 1


def test_sharding_refuses_what_cannot_be_split() -> None:
    ranks = Ranks(FakeGroup([0, 0, 0]))  # type: ignore[arg-type]
    with pytest.raises(ContextMisuse, match="IterableDataset cannot be split over devices 2"):
        ranks.shard(lambda: 10, True, 8, 0, True, False)
    with pytest.raises(ContextMisuse, match="batch_size 1 cannot be split over devices 2"):
        ranks.shard(lambda: 10, False, 1, 0, True, False)
    shard = ranks.shard(lambda: 10, False, 4, 0, False, False)
    assert len(shard) == 3
