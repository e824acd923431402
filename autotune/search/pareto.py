"""Pareto math on plain points (lists of objective values; no trials, no study): dominance, non-dominated sorting,
crowding distance, the MOASHA promotion rule, hypervolume. The front of a study's trials (results.py), the Pareto
pruners and the front-gain rule (pruners.py) and the candidates' choice (predicted.py) all compute with these.
"""

from __future__ import annotations

import math
from collections.abc import Container, Sequence

import numpy as np

from autotune.core import optuna_compat as compat


def dominates(a: list[float], b: list[float], directions: list[str]) -> bool:
    """a is at least as good as b everywhere and better somewhere."""
    better = False
    for x, y, d in zip(a, b, directions):
        x, y = (x, y) if d == "minimize" else (-x, -y)
        if x > y:
            return False
        better = better or x < y
    return better


def hypervolume_2d(points: Sequence[Sequence[float]], ref: tuple[float, float]) -> float:
    """Area dominated by (x, y) points, both minimized, inside the box below `ref`."""
    area, y_prev = 0.0, ref[1]
    for x, y in sorted((p for p in points if p[0] < ref[0] and p[1] < ref[1]), key=lambda p: (p[0], p[1])):
        if y < y_prev:
            area += (ref[0] - x) * (y_prev - y)
            y_prev = y
    return area


def hypervolume(points: Sequence[Sequence[float]], ref: Sequence[float]) -> float:
    """The hypervolume minimized `points` dominate inside the box below `ref`, in any number of dimensions (2-D: the
    sweep above; more: Optuna's exact algorithm)."""
    if not points:
        return 0.0
    if len(ref) == 2:
        return hypervolume_2d(points, (ref[0], ref[1]))
    inside = np.array([p for p in points if all(a < b for a, b in zip(p, ref))], dtype=float)
    return compat.hypervolume(inside, np.array(ref, dtype=float)) if len(inside) else 0.0


def nondominated_ranks(points: list[list[float]], directions: list[str]) -> list[int]:
    """Front index of each point (0 = non-dominated) by repeated peeling, on a dominance matrix (a rung table or a
    step of a study holds hundreds of points: pairwise Python comparisons per front would cost seconds)."""
    if not points:
        return []
    x = np.asarray(points, dtype=float) * np.array([1.0 if d == "minimize" else -1.0 for d in directions])
    if x.shape[1] == 2:
        return _ranks_2d(x)
    # dom[i, j]: j dominates i (no worse everywhere, better somewhere)
    dom = (x[None, :, :] <= x[:, None, :]).all(axis=2) & (x[None, :, :] < x[:, None, :]).any(axis=2)
    ranks = np.full(len(points), -1)
    left = np.ones(len(points), dtype=bool)
    r = 0
    while left.any():
        front = left & ~(dom[:, left].any(axis=1))
        ranks[front] = r
        left &= ~front
        r += 1
    return [int(v) for v in ranks]


def _ranks_2d(x: np.ndarray) -> list[int]:
    """Non-dominated sorting of minimized 2-D points in O(n log n): in (first, second) order every dominator of a
    point comes before it, so a point joins the first front whose lowest second value so far does not dominate it
    (each front's lowest second values fall front after front: bisect)."""
    order = sorted(range(len(x)), key=lambda i: (x[i, 0], x[i, 1]))
    lows: list[tuple[float, float]] = []  # per front: its lowest (second, first) so far
    ranks = [0] * len(x)
    for i in order:
        a, b = float(x[i, 0]), float(x[i, 1])
        lo, hi = 0, len(lows)
        while lo < hi:  # the first front with no member dominating (a, b)
            mid = (lo + hi) // 2
            y, f = lows[mid]
            if y < b or (y == b and f < a):
                lo = mid + 1
            else:
                hi = mid
        if lo == len(lows):
            lows.append((b, a))
        elif (b, a) < lows[lo]:
            lows[lo] = (b, a)
        ranks[i] = lo
    return ranks


def crowding_distances(points: list[list[float]], members: list[int]) -> dict[int, float]:
    """NSGA-II crowding distance of each member within its front: the normalized size of the box its neighbours
    on every objective span (the two ends of an objective: infinite, they hold the front's extent)."""
    out = {i: 0.0 for i in members}
    if len(members) <= 2:
        return {i: math.inf for i in members}
    for k in range(len(points[members[0]])):
        order = sorted(members, key=lambda i: (points[i][k], i))
        span = points[order[-1]][k] - points[order[0]][k]
        out[order[0]] = out[order[-1]] = math.inf
        for j in range(1, len(order) - 1):
            if span > 0:
                out[order[j]] += (points[order[j + 1]][k] - points[order[j - 1]][k]) / span
    return out


def promoted(points: list[list[float]], directions: list[str], eta: float, k: int | None = None) -> list[int]:
    """The indices of the top ceil(n / eta) points (or `k`) of a rung table, best first: whole successive Pareto
    fronts while they fit, then the last front's most isolated points by crowding distance (MOASHA,
    arXiv:2106.12639, with NSGA-II's tie break; equal distances go to the earlier index)."""
    return _top(points, directions, max(1, math.ceil(len(points) / eta)) if k is None else k)


def _top(points: list[list[float]], directions: list[str], k: int, skip: Container[int] = ()) -> list[int]:
    """MOASHA's top `k` of the points not in `skip`: one non-dominated sorting, then front after front (an
    overflowing one sorted whole by crowding distance, then the skipped ones left out: a NaN distance orders a
    subset otherwise than the whole)."""
    if k <= 0:
        return []
    fronts: dict[int, list[int]] = {}
    for i, r in enumerate(nondominated_ranks(points, directions)):
        fronts.setdefault(r, []).append(i)
    chosen: list[int] = []
    for r in sorted(fronts):
        left = [i for i in fronts[r] if i not in skip]
        if len(chosen) + len(left) > k:
            cd = crowding_distances(points, fronts[r])
            left = [i for i in sorted(fronts[r], key=lambda i: (-cd[i], i)) if i not in skip]
        chosen.extend(left[:k - len(chosen)])
        if len(chosen) >= k:
            break
    return chosen


def promoted_with_accurate(points: list[list[float]], directions: list[str], eta: float, quality: int,
                           share: float) -> list[int]:
    """`promoted`, with ceil(share x k) of its k slots given first to the most accurate points by the `quality`
    objective alone (ties: the earlier index), the rest to the best of the others by MOASHA over the whole table:
    the slow accurate points a front's accurate end needs are promoted even where the (accuracy, time) front at the
    rung ranks them low. (MOASHA's top kk less the accurate ones, for the smallest kk that leaves enough, is its
    order's first k - n_acc others: one sorting of the table, not one per accurate slot, on rungs of thousands.)"""
    k = max(1, math.ceil(len(points) / eta))
    n_acc = min(k, math.ceil(share * k)) if share > 0 else 0
    sign = -1.0 if directions[quality] == "maximize" else 1.0
    by_quality = sorted(range(len(points)), key=lambda i: (sign * points[i][quality], i))[:n_acc]
    return by_quality + _top(points, directions, k - n_acc, set(by_quality))

__all__ = ["crowding_distances", "dominates", "hypervolume", "hypervolume_2d", "nondominated_ranks", "promoted",
           "promoted_with_accurate"]
