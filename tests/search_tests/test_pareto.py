"""The Pareto math on plain points (search/pareto.py): non-dominated sorting, the MOASHA promotion, crowding
distance, hypervolume."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from autotune.core import optuna_compat as compat
from autotune.search import pareto
from autotune.search.pareto import dominates

# a rung table of 9 (accuracy up, time down) points in three known fronts of three
RUNG = {"A": [0.95, 5.0], "B": [0.90, 2.0], "C": [0.80, 1.0],  # front 0
        "D": [0.93, 6.0], "E": [0.85, 3.0], "F": [0.75, 1.5],  # front 1: each dominated by one of front 0
        "G": [0.90, 7.0], "H": [0.70, 4.0], "I": [0.60, 2.5]}  # front 2
MO = ["maximize", "minimize"]


def test_dominates_is_no_worse_everywhere_and_better_somewhere() -> None:
    assert dominates([0.9, 1.0], [0.8, 1.0], MO) and not dominates([0.9, 1.0], [0.9, 1.0], MO)
    assert not dominates([0.9, 2.0], [0.8, 1.0], MO)  # more accurate, slower: neither dominates
    assert dominates([1.0, 1.0], [1.0, 2.0], ["minimize", "minimize"])


def test_nondominated_ranks_peel_the_known_fronts() -> None:
    ranks = pareto.nondominated_ranks(list(RUNG.values()), MO)
    assert dict(zip(RUNG, ranks)) == {"A": 0, "B": 0, "C": 0, "D": 1, "E": 1, "F": 1, "G": 2, "H": 2, "I": 2}


def test_promoted_is_exactly_the_non_dominated_top_share() -> None:
    names = list(RUNG)
    assert sorted(names[i] for i in pareto.promoted(list(RUNG.values()), MO, 3)) == ["A", "B", "C"]
    # eta 2: ceil(9 / 2) = 5: front 0 whole, then the two ends of front 1 (crowding distance: infinite) over E
    assert sorted(names[i] for i in pareto.promoted(list(RUNG.values()), MO, 2)) == ["A", "B", "C", "D", "F"]


def test_promoted_breaks_the_last_front_by_crowding_distance() -> None:
    # P dominates all; Q..T one front; U behind R. Six, eta 2: three go on: P and front 1's two ends
    pts = {"P": [0.99, 1.0], "Q": [0.94, 6.0], "R": [0.90, 4.0], "S": [0.85, 3.5], "T": [0.70, 2.0], "U": [0.6, 5.0]}
    names = list(pts)
    assert sorted(names[i] for i in pareto.promoted(list(pts.values()), MO, 2)) == ["P", "Q", "T"]
    cd = pareto.crowding_distances(list(pts.values()), [1, 2, 3, 4])
    assert cd[1] == cd[4] == float("inf") and 0 < cd[2] < cd[3]  # R sits closer to its neighbours than S


def test_nondominated_ranks_two_objectives_match_peeling_ties_included() -> None:
    """The 2-D fast path (sorted sweep) against pairwise peeling, on points with many ties."""
    rng = random.Random(2)

    def peeled(points: list[list[float]], directions: list[str]) -> list[int]:
        ranks, left, r = [-1] * len(points), set(range(len(points))), 0
        while left:
            front = {i for i in left if not any(dominates(points[j], points[i], directions) for j in left if j != i)}
            for i in front:
                ranks[i] = r
            left -= front
            r += 1
        return ranks

    for _ in range(200):
        pts = [[rng.choice([0.1, 0.2, round(rng.random(), 1)]), rng.choice([1.0, 2.0, round(rng.random(), 1)])]
               for _ in range(rng.randint(0, 30))]
        for d in (["maximize", "minimize"], ["minimize", "minimize"]):
            assert pareto.nondominated_ranks(pts, d) == peeled(pts, d)


def test_promoted_with_accurate_is_the_accurate_ones_then_moasha_over_the_rest() -> None:
    """The one-pass promotion against its definition: the `share` most accurate, then MOASHA's smallest top kk
    that holds enough others (`promoted` once per kk), on tables with ties, 2 and 3 objectives, NaN and inf."""
    rng = random.Random(5)

    def defined(points: list[list[float]], dirs: list[str], eta: int, q: int, share: float) -> set[int]:
        k = max(1, math.ceil(len(points) / eta))
        n_acc = min(k, math.ceil(share * k)) if share > 0 else 0
        sign = -1.0 if dirs[q] == "maximize" else 1.0
        acc = sorted(range(len(points)), key=lambda i: (sign * points[i][q], i))[:n_acc]
        for kk in range(k - n_acc, len(points) + 1):
            picks = [i for i in pareto.promoted(points, dirs, eta, kk) if i not in acc]
            if len(picks) >= k - n_acc:
                return set(acc) | set(picks[:k - n_acc])
        raise AssertionError("unreachable")

    for _ in range(1500):
        dims = rng.choice([2, 3])
        pts = [[float(rng.randint(0, 4)) if rng.random() < 0.5 else rng.random() for _ in range(dims)]
               for _ in range(rng.randint(1, 40))]
        if rng.random() < 0.5:  # a diverged peer's values (a stopped trial's curve keeps them)
            pts[rng.randrange(len(pts))][rng.randrange(dims)] = rng.choice([math.nan, math.inf, -math.inf])
        dirs = [rng.choice(["minimize", "maximize"]) for _ in range(dims)]
        eta, q, share = rng.choice([2, 3, 4]), rng.randrange(dims), rng.choice([0.0, 0.25, 0.5, 1.0])
        got = pareto.promoted_with_accurate(pts, dirs, eta, q, share)
        assert len(got) == len(set(got)) == max(1, -(-len(pts) // eta))
        assert set(got) == defined(pts, dirs, eta, q, share)


def test_hypervolume_2d_is_the_hypervolume() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        pts = rng.uniform(0, 1, size=(int(rng.integers(1, 12)), 2))
        ref = (1.1, 1.2)
        want = compat.hypervolume(pts, np.array(ref))  # Optuna's exact algorithm
        assert pareto.hypervolume_2d(pts.tolist(), ref) == pytest.approx(want)
    assert pareto.hypervolume_2d([], (1, 1)) == 0.0
    assert pareto.hypervolume_2d([[2.0, 0.0]], (1, 1)) == 0.0  # outside the reference adds nothing


def test_hypervolume_in_two_and_more_dimensions() -> None:
    assert pareto.hypervolume([], (1.0, 1.0)) == 0.0
    assert pareto.hypervolume([[0.5, 0.5]], (1.0, 1.0)) == pytest.approx(0.25)  # the 2-D sweep
    assert pareto.hypervolume([[0.0, 0.0, 0.0], [0.5, 0.5, 0.5]], (1.0, 2.0, 3.0)) == pytest.approx(6.0)
    assert pareto.hypervolume([[2.0, 0.0, 0.0]], (1.0, 1.0, 1.0)) == 0.0  # outside the reference adds nothing
