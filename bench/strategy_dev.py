"""Development check of a search-strategy default against the one before it, on LCBench DEVELOPMENT tasks only.

Both runs come from bench/replay.py on the same dev tasks and seeds, saved with --save; the old default's run is made
from a checkout of the commit before the change (its "autotune" arm is the old default), with plain Optuna beside it:

    (old checkout) python bench/replay.py --workload lcbench --tasks dev --seeds 3 --workers 1 \
                       --arms "plain Optuna,autotune" --jobs 1 --save /tmp/old.json
    (this tree)    python bench/replay.py --workload lcbench --tasks dev --seeds 3 --workers 1 \
                       --arms autotune --jobs 1 --save /tmp/new.json
    python bench/strategy_dev.py --old /tmp/old.json --new /tmp/new.json
    python bench/strategy_dev.py --goals /tmp/dev/*/rep_*.json --arms "autotune,autotune cost-aware"

`--goals`: saved runs (`--save` or `--save-each` files, peers and variants merged by seed) read as the report reads
the report tasks: per variant and worker count, the issue's goals (bench/replay_match.goals: time to match plain
Optuna, the OptunaHub rule and rank-corrected MOASHA, tasks and seeds resampled; best accuracy within 0.002 of
plain's on >= 90 % of tasks), on the development tasks only.

Per task (paired by seed): the restricted mean time (RMST, censored at the budget) to 90 % of the fixed reference
hypervolume and to match plain Optuna's hypervolume at the end of its budget, as ratios old / new (above 1: the new
default is faster), the end hypervolume share, and the best accuracy. Report tasks are never read here.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import replay  # noqa: E402
from bench import replay_match as rm  # noqa: E402


def _runs(path: Path, arm: str, workers: int = 1) -> dict[str, dict[int, list[Any]]]:
    """task -> seed -> events of `arm` at `workers` workers."""
    saved = json.loads(path.read_text())
    out: dict[str, dict[int, list[Any]]] = {}
    for key, rs in saved["runs"].items():
        task, n, a = key.split("|")
        if a == arm and int(n) == workers:
            out.setdefault(task, {}).update({s: [tuple(e) for e in ev] for s, ev in zip(saved["seeds"], rs)})
    return out


def time_to(ev: list[Any], target_hv: float, t_ref: float) -> float:
    """The first simulated time the run's front reaches `target_hv` (linear hypervolume), inf where it never does."""
    pts: list[tuple[float, float]] = []
    for at, acc, tt, _ in ev:
        if acc is None or tt is None:
            continue
        pts.append((tt, acc))
        if replay.HV["lin"](pts, t_ref) >= target_hv:
            return float(at)
    return math.inf


def hv_end(ev: list[Any], t_ref: float) -> float:
    pts = [(tt, acc) for _, acc, tt, _ in ev if acc is not None and tt is not None]
    return replay.HV["lin"](pts, t_ref) if pts else 0.0


def goals(paths: list[Path], arms: list[str]) -> None:
    """The issue's goals per variant in `arms` and worker count, on the dev tasks of the saved runs."""
    peers = ["plain Optuna", "OptunaHub multi_metric_pruner", "MOASHA rank-corrected"]
    runs, seeds = replay.load(paths, peers + arms)
    leaked = sorted({str(t) for t, _, _ in runs if t not in replay.DEV_TASKS})
    if leaked:
        raise SystemExit(f"strategy_dev.py: report tasks {', '.join(leaked)} in the runs; development tasks only")
    budgets = {(t, n): replay.budget_of("lcbench", t, n) for t, n, _ in runs}
    ms = replay.all_measures("lcbench", runs, budgets)
    print(f"dev goals: seeds {seeds[0]}-{seeds[-1]}; time to match: geometric mean over tasks x seeds [95 % interval]")
    print("| variant | block | goal | figure | |\n|---|---|---|---|---|")
    for n in sorted({n for _, n, _ in runs}):
        tasks = sorted({t for t, w, a in runs if w == n and a in arms and all((t, w, p) in runs for p in peers)})
        for arm in arms:
            if all((t, n, arm) in ms for t in tasks) and tasks:
                renamed = {(t, w, "autotune" if a == arm else a): v for (t, w, a), v in ms.items()
                           if w == n and t in tasks and (a == arm or a in peers)}
                for line in rm.goals(renamed, tasks, n, "autotune", budgets, f"{n}w, {len(tasks)} tasks"):
                    print(f"| {arm} {line}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, help="saved replay runs with 'plain Optuna' and 'autotune'")
    ap.add_argument("--new", type=Path, help="saved replay runs with 'autotune' (the new default)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--goals", type=Path, nargs="+", help="saved runs: the goals per variant (--arms)")
    ap.add_argument("--arms", default="autotune", help="comma-separated variants, with --goals")
    args = ap.parse_args(argv)
    if args.goals:
        goals(args.goals, [a for a in args.arms.split(",") if a])
        return
    if args.old is None or args.new is None:
        ap.error("--old and --new (or --goals)")
    old, plain, new = (_runs(args.old, "autotune", args.workers), _runs(args.old, "plain Optuna", args.workers),
                       _runs(args.new, "autotune", args.workers))
    tasks = sorted(set(old) & set(new) & set(plain))
    leaked = [t for t in tasks if t not in replay.DEV_TASKS]
    if leaked:
        raise SystemExit(f"strategy_dev.py: report tasks {', '.join(leaked)} in the runs; development tasks only")
    print(f"{'task':>7} {'seeds':>5}  {'90% old/new':>12} {'match old/new':>13} {'match plain/new':>15}  "
          f"{'HV old':>6} {'HV new':>6}  {'acc old':>7} {'acc new':>7} {'acc plain':>9}")
    r90, rmatch, rplain, dacc, dacc_plain = [], [], [], [], []
    for task in tasks:
        seeds = sorted(set(old[task]) & set(new[task]) & set(plain[task]))
        front, t_ref = replay.reference("lcbench", task)
        budget = replay.budget_of("lcbench", task, args.workers)
        ref_hv = replay.HV["lin"](front, t_ref)
        o90 = [time_to(old[task][s], 0.9 * ref_hv, t_ref) for s in seeds]
        n90 = [time_to(new[task][s], 0.9 * ref_hv, t_ref) for s in seeds]
        goal = {s: hv_end(plain[task][s], t_ref) for s in seeds}  # what plain Optuna has at the end of the budget
        om = [time_to(old[task][s], goal[s], t_ref) for s in seeds]
        nm = [time_to(new[task][s], goal[s], t_ref) for s in seeds]
        a = replay.rmst(o90, budget) / replay.rmst(n90, budget)
        b = replay.rmst(om, budget) / replay.rmst(nm, budget)
        c = budget / replay.rmst(nm, budget)  # plain reaches its own end at the budget
        r90.append(a)
        rmatch.append(b)
        rplain.append(c)
        ho = statistics.fmean(hv_end(old[task][s], t_ref) / ref_hv for s in seeds)
        hn = statistics.fmean(hv_end(new[task][s], t_ref) / ref_hv for s in seeds)
        acc = {k: statistics.fmean(max((e[1] for e in r[task][s] if e[1] is not None), default=0.0) for s in seeds)
               for k, r in (("old", old), ("new", new), ("plain", plain))}
        dacc.append(acc["new"] - acc["old"])
        dacc_plain.append(acc["new"] - acc["plain"])
        print(f"{task:>7} {len(seeds):>5}  {a:>11.2f}x {b:>12.2f}x {c:>14.2f}x  {ho:>6.3f} {hn:>6.3f}  "
              f"{acc['old']:>7.4f} {acc['new']:>7.4f} {acc['plain']:>9.4f}")
    print(f"median over {len(tasks)} dev tasks: to 90 % {statistics.median(r90):.2f}x, to match plain's end "
          f"{statistics.median(rmatch):.2f}x (old / new); new vs plain to match {statistics.median(rplain):.2f}x; "
          f"best accuracy new - old {statistics.median(dacc):+.4f}, new - plain {statistics.median(dacc_plain):+.4f} "
          f"(medians); tasks where new is > 0.002 below plain: {sum(d < -0.002 for d in dacc_plain)}")


if __name__ == "__main__":
    main()
