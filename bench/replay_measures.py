"""The replay benchmark's measures, pure (bench/replay.py's docstring says what they are; tests/test_bench_replay.py):
per seed, the times to the targets, the end's hypervolume shares, the anytime curve and its rises (`measures`);
over seeds, the restricted mean time (`rmst`) and the paired bootstrap intervals of ratios and differences."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench import time_to_target as ttt

if TYPE_CHECKING:
    from bench.replay_arms import Events

TARGETS = (0.90, 0.95)
GRID = 40  # anytime curves: budget shares 1/GRID .. 1


def hv_log(points: Sequence[tuple[float, float]], t_ref: float) -> float:
    """Area dominated by (time, accuracy) points against (t_ref, 0) on log time."""
    f = [p for p in ttt.front(list(points)) if 0 < p[0] < t_ref]
    area = 0.0
    for i, (t, a) in enumerate(f):
        nxt = f[i + 1][0] if i + 1 < len(f) else t_ref
        area += a * (math.log(nxt) - math.log(t))
    return area


HV: dict[str, Callable[[Sequence[tuple[float, float]], float], float]] = {
    "lin": lambda pts, t_ref: ttt.hypervolume(list(pts), t_ref), "log": hv_log}


@dataclass(frozen=True)
class Seed:
    """One run's measures: time to each target (inf: never) per view, the end's hypervolume shares, best accuracy
    (of counted points), trials, stopped, the anytime hypervolume share (linear) on the budget grid, and `steps`:
    (simulated seconds, that share) at each of its rises (bench/replay_match.py: time to match, its area)."""

    to: dict[tuple[str, float], float]
    hv_end: dict[str, float]
    best_acc: float
    trials: int
    stopped: int
    anytime: tuple[float, ...]
    steps: tuple[tuple[float, float], ...] = ()


def measures(ev: Events, front: Sequence[tuple[float, float]], t_ref: float, budget: float) -> Seed:
    refs = {v: HV[v](front, t_ref) for v in HV}
    pts: list[tuple[float, float]] = []
    to = {(v, q): math.inf for v in HV for q in TARGETS}
    grid = [budget * (i + 1) / GRID for i in range(GRID)]
    anytime = [0.0] * GRID
    gi = 0
    hv_lin = 0.0
    steps: list[tuple[float, float]] = []
    for at, acc, tt, _ in ev:
        while gi < GRID and grid[gi] < at:
            anytime[gi] = hv_lin / refs["lin"]
            gi += 1
        if acc is None or tt is None:
            continue
        pts.append((tt, acc))
        for v in HV:
            share = HV[v](pts, t_ref) / refs[v]
            if v == "lin":
                if share > hv_lin / refs["lin"] and at <= budget:
                    steps.append((at, share))
                hv_lin = share * refs["lin"]
            for q in TARGETS:
                if share >= q and math.isinf(to[(v, q)]):
                    to[(v, q)] = at
    while gi < GRID:
        anytime[gi] = hv_lin / refs["lin"]
        gi += 1
    return Seed(to, {v: HV[v](pts, t_ref) / refs[v] if pts else 0.0 for v in HV},
                max((a for _, a in pts), default=0.0), len(ev), sum(1 for e in ev if e[3] == "PRUNED"),
                tuple(anytime), tuple(steps))


def rmst(ts: Sequence[float], budget: float) -> float:
    """Restricted mean time to target: the mean of min(time, budget) (a seed that never got there: the budget)."""
    return statistics.fmean(min(t, budget) for t in ts)


def _picks(n_seeds: int, n: int, seed: int) -> Any:
    import numpy as np

    return np.random.default_rng(seed).integers(0, n_seeds, size=(n, n_seeds))


def _rmst_reps(ts: Sequence[float], budget: float, picks: Any) -> Any:
    import numpy as np

    return np.minimum(np.asarray(ts, dtype=float), budget)[picks].mean(axis=1)


def paired_ratio(base: Sequence[float], mine: Sequence[float], budget: float, n: int = 2000,
                 seed: int = 0) -> tuple[float, float, float]:
    """RMST(base) / RMST(mine) with its 95 % paired bootstrap interval (seed indices resampled together)."""
    import numpy as np

    picks = _picks(len(base), n, seed)
    reps = np.sort(_rmst_reps(base, budget, picks) / _rmst_reps(mine, budget, picks))
    return rmst(base, budget) / rmst(mine, budget), float(reps[int(0.025 * n)]), float(reps[int(0.975 * n) - 1])


def median_ratio(per_task: Sequence[tuple[Sequence[float], Sequence[float], float]], n: int = 1000,
                 seed: int = 0) -> tuple[float, float, float]:
    """The median over tasks of RMST(base) / RMST(mine), and its 95 % interval: in every replicate each task's
    seeds are resampled (paired), its ratio recomputed, and the median over tasks taken."""
    import numpy as np

    point = statistics.median(rmst(b, bud) / rmst(m, bud) for b, m, bud in per_task)
    ratios = []
    for k, (b, m, bud) in enumerate(per_task):
        picks = _picks(len(b), n, seed + k)
        ratios.append(_rmst_reps(b, bud, picks) / _rmst_reps(m, bud, picks))
    reps = np.sort(np.median(np.stack(ratios), axis=0))
    return point, float(reps[int(0.025 * n)]), float(reps[int(0.975 * n) - 1])


def paired_diff(base: Sequence[float], mine: Sequence[float], n: int = 2000, seed: int = 0) -> tuple[float, float,
                                                                                                     float]:
    """mean(mine - base) with its 95 % bootstrap interval."""
    import numpy as np

    d = np.asarray(mine, dtype=float) - np.asarray(base, dtype=float)
    reps = np.sort(d[_picks(len(d), n, seed)].mean(axis=1))
    return float(d.mean()), float(reps[int(0.025 * n)]), float(reps[int(0.975 * n) - 1])
