"""Speed-ups as HPO papers report them, for the replay benchmark (bench/replay.py): time to match and the anytime
hypervolume, with intervals over tasks and seeds together, and the issue's goals read off those intervals.

Each run is summed up by its anytime hypervolume: `steps`, the (simulated seconds, share of the reference
hypervolume on linear time) at each rise of its front, within its budget.

- *Time to match* (`match_ratio`), per seed, of an arm against a baseline that ran the same seed: the baseline's
  hypervolume at the END of the budget is the target; where the arm reaches it, at t, the ratio is budget / t (the
  arm gets in t what the baseline gives for the whole budget); where it never does, the reverse ratio, below 1:
  t' / budget, t' the time the baseline reached the arm's own end hypervolume (so 0.5 reads "the baseline got
  there in half the budget"). A front of nothing (hypervolume 0) is reached by a run's first counted point. The
  budget stands for the baseline's time: a run against an identical copy scores budget / its last rise (above 1).
  *Strict* (printed beside it, not the goals' measure): the baseline's own time to its end hypervolume instead
  (an identical copy scores 1, the ratio is the reciprocal of the baseline's against the arm, and a baseline that
  stops rising early at a low hypervolume looks fast).
- *Anytime hypervolume* (`auc`): the area under the share-of-reference curve over the budget, divided by the
  budget (1: the whole reference front from the first second); compared as the paired ratio arm / baseline.
- Intervals (`boot`): a two-level bootstrap, tasks resampled with replacement and, within each drawn task, its
  seeds (the per-seed values are paired already: arm and baseline ran the same seed). Ratios are averaged on the
  log scale: the point is the geometric mean over tasks of each task's geometric mean over seeds.
- A goal is met only where its interval's lower end clears it (`goals`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

Steps = Sequence[tuple[float, float]]  # (simulated seconds, hypervolume share) at each rise, times increasing
TOL = 1e-12  # the same front computed twice gives the same hypervolume; only rounding is forgiven
N_BOOT = 2000
ACC_TOL = 0.002  # the accuracy goal: best accuracy no lower than the baseline's by more than this ...
ACC_SHARE = 0.90  # ... on at least this share of tasks
GOALS: tuple[tuple[str, float], ...] = (("plain Optuna", 2.0), ("MOASHA rank-corrected", 1.25),
                                        ("OptunaHub multi_metric_pruner", 1.25))


def end_of(steps: Steps) -> float:
    return steps[-1][1] if steps else 0.0


def first_at(steps: Steps, target: float) -> float | None:
    """The first time the hypervolume share is at least `target` (and above 0: a front of something), or None."""
    for t, hv in steps:
        if hv > 0 and hv >= target - TOL:
            return t
    return None


def match_ratio(mine: Steps, base: Steps, budget: float, strict: bool = False) -> float:
    """Time to match, `mine` against `base` (module docstring): budget / t where `mine` reaches the baseline's end
    hypervolume at t; else t' / budget, t' when `base` reached the end hypervolume of `mine`. `strict`: the
    baseline's own time to its end instead of the budget (and the arm's in the reverse ratio): an arm against an
    identical run is exactly 1, and the ratio against a baseline is the reciprocal of the baseline's against it."""
    def own(steps: Steps) -> float:
        return (first_at(steps, end_of(steps)) or budget) if strict else budget

    def clamp(t: float) -> float:
        return min(max(t, 1e-9), budget)

    t = first_at(mine, end_of(base))
    if t is not None:
        return clamp(own(base)) / clamp(t)
    if not mine and not base:
        return 1.0
    t_base = first_at(base, end_of(mine))  # the baseline got further: it passed the arm's end somewhere
    return clamp(t_base or budget) / clamp(own(mine))


def auc(steps: Steps, budget: float) -> float:
    """The area under the hypervolume share over [0, budget], divided by the budget."""
    area = 0.0
    for i, (t, hv) in enumerate(steps):
        if t >= budget:
            break
        nxt = steps[i + 1][0] if i + 1 < len(steps) else budget
        area += hv * (min(nxt, budget) - t)
    return area / budget


def boot(per_task: Sequence[Sequence[float]], stat: Callable[[np.ndarray], np.ndarray] | None = None,
         n: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """(point, 2.5 %, 97.5 %) of a statistic of per-task, per-seed values under the two-level bootstrap (tasks,
    then each drawn task's seeds, with replacement). `stat` maps an array (replicates, tasks) of per-task seed means
    to one value per replicate; default: the mean over tasks."""
    stat = stat or (lambda m: m.mean(axis=1))
    k = len(per_task)
    width = max(len(v) for v in per_task)
    vals = np.full((k, width), np.nan)
    counts = np.array([len(v) for v in per_task])
    for i, v in enumerate(per_task):
        vals[i, : len(v)] = v
    point = float(stat(np.array([[np.mean(v) for v in per_task]]))[0])
    rng = np.random.default_rng(seed)
    tasks = rng.integers(0, k, size=(n, k))
    seeds = (rng.random((n, k, width)) * counts[tasks][:, :, None]).astype(int)  # within each drawn task's count
    drawn = vals[tasks[:, :, None], seeds]
    used = np.arange(width)[None, None, :] < counts[tasks][:, :, None]
    means = np.where(used, drawn, 0.0).sum(axis=2) / counts[tasks]
    reps = np.sort(stat(means))
    return point, float(reps[int(0.025 * n)]), float(reps[int(0.975 * n) - 1])


def ratio_boot(per_task: Sequence[Sequence[float]], seed: int = 0) -> tuple[float, float, float]:
    """The geometric mean over tasks of each task's geometric mean over seeds, with its interval."""
    logs = [[math.log(max(r, 1e-9)) for r in v] for v in per_task]
    return tuple(math.exp(x) for x in boot(logs, seed=seed))  # type: ignore[return-value]


def share_boot(per_task: Sequence[Sequence[float]], floor: float, seed: int = 0) -> tuple[float, float, float]:
    """The share of tasks whose mean over seeds is at least `floor`, with its interval."""
    return boot(per_task, lambda m: (m >= floor - TOL).mean(axis=1), seed=seed)


# ---------------------------------------------------------------- tables (markdown: they paste into RESULTS.md)

Ms = Mapping[tuple[Any, int, str], Sequence[Any]]  # (task, workers, arm) -> per-seed measures, paired by position


def per_task(ms: Ms, tasks: Sequence[Any], workers: int, arm: str, base: str,
             get: Callable[[Any, Any, float], float], budgets: Mapping[tuple[Any, int], float]) -> list[list[float]]:
    return [[get(m, b, budgets[(t, workers)]) for m, b in zip(ms[(t, workers, arm)], ms[(t, workers, base)])]
            for t in tasks]


def fmt(x: tuple[float, float, float]) -> str:
    return f"{x[0]:.2f}x [{x[1]:.2f}, {x[2]:.2f}]"


MEASURES: dict[str, Callable[[Any, Any, float], float]] = {
    "time to match": lambda m, b, budget: match_ratio(m.steps, b.steps, budget),
    "time to match, strict": lambda m, b, budget: match_ratio(m.steps, b.steps, budget, strict=True),
    "anytime hypervolume": lambda m, b, budget: auc(m.steps, budget) / max(auc(b.steps, budget), 1e-9),
}


def tables(ms: Ms, tasks: Sequence[Any], workers: int, arms: Sequence[str], bases: Sequence[str],
           budgets: Mapping[tuple[Any, int], float], short: Mapping[str, str], out: dict[str, Any],
           tag: str = "") -> None:
    """Print the time-to-match and anytime-hypervolume tables (arm rows, baseline columns); figures into `out`."""
    for what, get in MEASURES.items():
        print(f"\n{what}{' (' + tag + ')' if tag else ''}: " + (
            "per seed, budget / the time the arm reaches the baseline's end hypervolume (never: the reverse ratio, "
            "below 1)" if what == "time to match" else
            "the same with the baseline's own time to its end hypervolume for the budget (an arm against itself: "
            "1; a baseline that stops rising early is hard to beat)" if what == "time to match, strict" else
            "area under the hypervolume share over the budget, ratio arm / baseline per seed")
              + "; geometric mean over tasks x seeds [95 % interval, tasks and seeds resampled] (tasks above 1)\n")
        print("| arm | " + " | ".join(f"vs {short.get(b, b)}" for b in bases) + " |")
        print("|---|" + "---|" * len(bases))
        for arm in arms:
            cells = []
            for b in bases:
                if b == arm:
                    cells.append("-")
                    continue
                vals = per_task(ms, tasks, workers, arm, b, get, budgets)
                x = ratio_boot(vals)
                above = sum(math.exp(np.mean([math.log(max(r, 1e-9)) for r in v])) > 1 for v in vals)
                out[f"{what}|{tag}|{workers}|{arm}|{b}"] = [*x, above]
                cells.append(f"{fmt(x)} ({above}/{len(tasks)})")
            print(f"| {arm} | " + " | ".join(cells) + " |")


def goals(ms: Ms, tasks: Sequence[Any], workers: int, arm: str, budgets: Mapping[tuple[Any, int], float],
          tag: str = "") -> list[str]:
    """The issue's goals for `arm` in one block, each 'met' only where its interval's lower end clears it."""
    lines = []
    for base, need in GOALS:
        if (tasks[0], workers, base) not in ms:
            continue
        x = ratio_boot(per_task(ms, tasks, workers, arm, base, MEASURES["time to match"], budgets))
        strict = ratio_boot(per_task(ms, tasks, workers, arm, base, MEASURES["time to match, strict"], budgets))
        lines.append(f"| {tag} | time to match {base} >= {need:g}x | {fmt(x)} (strict {fmt(strict)}) | "
                     f"{'met' if x[1] >= need else 'not met'} |")
    if (tasks[0], workers, "plain Optuna") in ms:
        diffs = per_task(ms, tasks, workers, arm, "plain Optuna", lambda m, b, _: m.best_acc - b.best_acc, budgets)
        s = share_boot(diffs, -ACC_TOL)
        lines.append(f"| {tag} | best accuracy >= plain's - {ACC_TOL:g} on >= {ACC_SHARE:.0%} of tasks | "
                     f"{s[0]:.0%} of {len(tasks)} [{s[1]:.0%}, {s[2]:.0%}] | "
                     f"{'met' if s[1] >= ACC_SHARE - TOL else 'not met'} |")
    return lines


__all__ = ["GOALS", "auc", "boot", "first_at", "goals", "match_ratio", "ratio_boot", "share_boot", "tables"]
