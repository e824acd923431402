"""The replay benchmark: every strategy on one simulator and one cost model, many seeds, measured like a paper.

    python bench/replay.py --workload lcbench --tasks report --seeds 50 --workers 1 8 [--jobs 2]
    python bench/replay.py --workload mnist1d --seeds 50 --workers 1 8
    python bench/replay.py --workload lcbench --report     # the report's tables, resumable (bench/replay_report.py)

Workloads: `lcbench` (YAHPO Gym's LCBench surrogate, bench/replay_lcbench.py: 34 OpenML tasks, split into
DEV_TASKS, on which defaults were chosen, and the rest, REPORT, on which results are only reported; report seeds
start at REPORT_SEED, drawn after the defaults were frozen), `mnist1d` and `digits` (recorded curves,
bench/recordings/, answered by their nearest recorded neighbour: bench/replay_workload.py).

Arms (bench/replay_arms.py, bench/replay_syne.py): plain Optuna (MO-TPE, no pruning), random search, Optuna +
OptunaHub's multi_metric_pruner (its published rule), Syne Tune's MOASHA as shipped and rank-corrected (Syne
Tune's simulator, no latency, a constant maximum resource), and autotune (the study's real objective on the
storage a real run has, SQLite) with its defaults; named variants for development (`--arms`).
Cost model, every arm: the workload's time per epoch, and each arm's own work (sampler, pruner, storage; Syne
Tune's tuner loop and scheduler) in thread CPU seconds (`--free-strategy`: not charged). One counting rule for
every arm that stops trials: a stopped trial's values count toward the front only where they are what the
configuration with `epochs: k` trains (bench/replay_arms.counted; never on LCBench, whose epochs are fixed).

Measures (`measures`): a fixed reference front per workload and task, independent of the arms: LCBench, the front
of 2,000 random configurations of the space trained 52 epochs (LCBench's own design: bench/yahpo_lcbench/fronts.json,
bench/replay_lcbench.reference_front), or every (recorded curve, epochs in the space's range) point of a recording;
time reference twice the median training time of a random configuration (or 1.1 x
the front's slowest time, if later), accuracy reference 0. Per seed, the
simulated time at which an arm's front (completed and counted trials) reaches 90 % and 95 % of the reference
hypervolume, on linear time and, as a second view, on log time (which weighs the front's accurate, slow end as
much as its fast end). Censoring: a seed that never gets there is counted at the budget, and the statistic is the
restricted mean time to target (RMST: the mean over seeds of min(time, budget)). Speed-up of an arm over a
baseline: RMST(baseline) / RMST(arm), with a 95 % paired bootstrap interval (the seeds resampled together: both
arms ran the same seeds); on LCBench the median of the per-task ratios, its interval from the same resampling in
every task, and on how many tasks the interval is above 1. Best accuracy at the end: the most accurate counted
point, its mean paired difference to each baseline with a 95 % interval. Anytime curves (`--curves FILE`): the
hypervolume share on a grid of budget shares, median and quartiles over tasks x seeds (docs/figures, made by
bench/replay_figure.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402

from bench import replay_arms, replay_match, replay_syne  # noqa: E402
from bench import time_to_target as ttt  # noqa: E402
from bench.replay_measures import GRID, HV, TARGETS, Seed, measures, median_ratio, paired_diff, paired_ratio, rmst  # noqa: E402
from bench.replay_workload import RECORDINGS, Workload  # noqa: E402

Events = replay_arms.Events
SPACES = {"mnist1d": "search_spaces/mnist1d.yaml", "digits": "search_spaces/cnn.yaml",
          "lcbench": "bench/yahpo_lcbench/lcbench.yaml"}
BUDGETS = {"mnist1d": 90.0, "digits": 60.0}  # simulated seconds, 1 worker (LCBench: BUDGET_TRIALS per task)
BUDGET_TRIALS = 20.0  # LCBench, 1 worker: the budget is this many times the task's median 52-epoch time
# LCBench: the development tasks (defaults chosen on these): 7593 and 146212, which the issue's first look showed,
# and six drawn by random.Random(42).sample from the other 32 (tasks are otherwise in config_space.json's order)
DEV_TASKS = ("7593", "146212", "167152", "3945", "189354", "167161", "189909", "189873")
REPORT_SEED = 1000  # report seeds: REPORT_SEED, REPORT_SEED + 1, ... (development: 0, 1, ...)
# name -> (runner, pruning over the space's own, study over its own); the peers first
ARMS: dict[str, tuple[str, dict[str, Any] | None, dict[str, Any]]] = {
    "plain Optuna": ("plain", None, {}),
    "random search": ("random", None, {}),
    "OptunaHub multi_metric_pruner": ("optunahub", None, {}),
    "MOASHA as shipped": ("moasha", None, {}),
    "MOASHA rank-corrected": ("moasha_corrected", None, {}),
    "autotune": ("autotune", None, {}),  # the space file's own settings: autotune's defaults
    # development variants
    "autotune pareto_asha": ("autotune", {"pruner": "pareto_asha"}, {}),
    "autotune pareto": ("autotune", {"pruner": "pareto"}, {}),
    "autotune no pruning": ("autotune", {"pruner": "none"}, {}),
    "autotune predicted front 8": ("autotune", None, {"candidates": 8}),
    "autotune candidates auto": ("autotune", None, {"candidates": "auto"}),
    "autotune pareto_asha from epoch 4": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"min_epochs": 4}}, {}),
    "autotune pareto_asha eta 2": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"reduction_factor": 2}}, {}),
    # issue 48's strategy, one part at a time (bench/strategy_dev.py)
    "autotune rungs from epoch 1": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"min_epochs": 1}}, {}),
    "autotune cost-blind": ("autotune", None, {}),  # (now the default: cost-aware proposals are off)
    "autotune cost-aware": ("autotune", None, {}),
    "autotune cheap start only": ("autotune", None, {}),  # START_POOL 8
    "autotune cost 0.3": ("autotune", None, {}),
    "autotune accurate share only": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"min_epochs": 1}}, {}),
    "autotune learned rungs only": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"accurate_share": 0.0}}, {}),
    "autotune accurate share 1/4": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"accurate_share": 0.25}}, {}),
    "autotune accurate share 1/2": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"accurate_share": 0.5}}, {}),
    "autotune rungs from epoch 2": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"min_epochs": 2}}, {}),
    "autotune alone 1/4": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"alone_share": 0.25}}, {}),
    "autotune alone 1/5": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"alone_share": 0.2}}, {}),
    "autotune alone off": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"alone_share": None}}, {}),
    "autotune running peers": ("autotune", None, {}),  # the default once running trials joined the rung tables
    "autotune proven rungs": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"first_rung": "proven"}}, {}),
    "autotune optimistic rungs": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"first_rung": "optimistic"}},
                                  {}),
    # the same, once the rung's agreement was corrected for range restriction (search/rungs.unrestricted)
    "autotune optimistic corrected": ("autotune", {"pruner": "pareto_asha",
                                                   "pruner_args": {"first_rung": "optimistic"}}, {}),
}
# the predicted front's constants, one at a time with optimistic rungs (bench/RESULTS.md, "Predictions from the fourth
# trial"): each an autotune arm with that constant set for its run
SAMPLER_VARIANTS: dict[str, dict[str, Any]] = {
    "autotune explore 4": {"EXPLORE_EVERY": 4}, "autotune min trials 4": {"MIN_TRIALS": 4},
    "autotune min trials 2": {"MIN_TRIALS": 2}, "autotune optimism 2": {"OPTIMISM": 2.0},
    "autotune optimism 0.5": {"OPTIMISM": 0.5}, "autotune local 1/4": {"LOCAL_SHARE": 0.25},
    "autotune refit every trial": {"REFIT_GROWTH": 0.0}, "autotune refit by growth": {"REFIT_ALL": 0},
    "autotune random explore 1/2": {"RANDOM_EVERY": 2}, "autotune accurate 1/2": {"ACCURATE_EVERY": 2},
    "autotune accurate 1/4": {"ACCURATE_EVERY": 4}, "autotune accurate off": {"ACCURATE_EVERY": 0},
    "autotune clock at its mean": {"COST_OPTIMISM": 0.0}, "autotune optimistic clock": {"COST_OPTIMISM": 1.0},
    "autotune near clock 0.1": {"NEAR_SCALE": 0.1}, "autotune near all 0.1": {"NEAR_SCALE": 0.1, "NEAR_QUALITY": True},
    "autotune share 0.1": {"AUTO_SHARE": 0.1}, "autotune share 0.2": {"AUTO_SHARE": 0.2},
    "autotune share 0.02": {"AUTO_SHARE": 0.02}, "autotune share 0": {"AUTO_SHARE": 0.0},
    "autotune refit all 250": {"REFIT_ALL": 250},
    "autotune floored clock": {"COST_OPTIMISM": 1.0, "COST_FLOOR": True},
    "autotune accurate owed": {"ACCURATE_OWED": True}}
ARMS.update({name: ("autotune", None, {}) for name in SAMPLER_VARIANTS})
# development variants of the predicted front's constants (autotune/search/predicted.py), set for one run
BLIND = {"COST_WEIGHT": 0.0, "START_POOL": 1}
CONSTANTS: dict[str, dict[str, Any]] = {"autotune cost-blind": BLIND,
                                        "autotune cost-aware": {"COST_WEIGHT": 1.0, "START_POOL": 8},
                                        "autotune cheap start only": {"START_POOL": 8},
                                        "autotune cost 0.3": {"COST_WEIGHT": 0.3, "START_POOL": 8},
                                        "autotune accurate share only": BLIND, "autotune learned rungs only": BLIND,
                                        **SAMPLER_VARIANTS}
DEFAULT_ARMS = ("plain Optuna", "random search", "OptunaHub multi_metric_pruner", "MOASHA as shipped",
                "MOASHA rank-corrected", "autotune")
BASELINES = ("plain Optuna", "random search", "OptunaHub multi_metric_pruner", "MOASHA as shipped",
             "MOASHA rank-corrected")
SHORT = {"plain Optuna": "plain", "random search": "random", "OptunaHub multi_metric_pruner": "OptunaHub",
         "MOASHA as shipped": "MOASHA", "MOASHA rank-corrected": "MOASHA-rc"}


# ---------------------------------------------------------------- workloads, tasks, budgets, references


@cache
def recording(name: str) -> Workload:
    return Workload.load(RECORDINGS / f"{name}.jsonl.gz")


@cache
def lcbench(task: str) -> Any:
    from bench.replay_lcbench import LCBench

    return LCBench(task)


def workload(name: str, task: str | None) -> Any:
    return lcbench(str(task)) if name == "lcbench" else recording(name)


def task_list(name: str, which: str) -> list[str | None]:
    if name != "lcbench":
        return [None]
    from bench.replay_lcbench import tasks

    every = tasks()
    if which == "dev":
        return list(DEV_TASKS)
    if which == "report":
        return [t for t in every if t not in DEV_TASKS]
    if which == "all":
        return every
    chosen = [t for t in which.split(",") if t]
    unknown = [t for t in chosen if t not in every]
    if unknown:
        raise SystemExit(f"replay.py: --tasks: unknown {', '.join(unknown)}; "
                         f"known: dev, report, all, {', '.join(every)}")
    return chosen


def budget_of(name: str, task: str | None, workers: int, trials: float = BUDGET_TRIALS) -> float:
    """Simulated seconds: 1 worker, the workload's budget (LCBench: `trials` x the task's median 52-epoch time);
    several workers, that / workers x 2."""
    if name == "lcbench":
        from bench.replay_lcbench import fronts

        one = trials * float(fronts()[str(task)]["median_time_s"])
    else:
        one = BUDGETS[name]
    return one if workers == 1 else one * 2 / workers


@cache
def reference(name: str, task: str | None) -> tuple[tuple[tuple[float, float], ...], float]:
    """(the fixed reference front as (time, accuracy) points, the time reference) of a workload and task. The time
    reference: twice the median training time of a configuration drawn at random from the space (or 1.1 x the
    front's slowest time, if later): a trial slower than that adds nothing, and the front's fast end (a few
    extreme configurations no search of tens of trials finds) does not decide the hypervolume alone."""
    if name == "lcbench":
        from bench.replay_lcbench import fronts

        pts = [(float(t), float(a)) for t, a in fronts()[str(task)]["front"]]
        typical = float(fronts()[str(task)]["median_time_s"])
    else:
        cfg = replay_arms.variant(SPACES[name])
        e = cfg.space["epochs"]
        pts = [(float(c.epochs[k - 1]["train_time_s"]), float(c.epochs[k - 1]["val_accuracy"]))
               for c in recording(name).curves for k in range(int(e.low), int(e.high) + 1) if k <= len(c.epochs)]
        typical = statistics.median(t for t, _ in pts)
    front = tuple(ttt.front(pts))
    return front, max(1.1 * max(t for t, _ in front), 2.0 * typical)


# ---------------------------------------------------------------- one run


def runner(arm: str, space_file: str) -> tuple[Callable[..., Events], Any]:
    kind, pruning, study = ARMS[arm]
    cfg = replay_arms.variant(space_file, pruning, **study)
    if kind == "plain":
        return replay_arms.plain("tpe"), cfg
    if kind == "random":
        return replay_arms.plain("random"), cfg
    if kind == "optunahub":
        return replay_arms.plain("tpe", pruned=True), cfg
    if kind in ("moasha", "moasha_corrected"):
        def moasha(*a: Any, **k: Any) -> Events:
            return replay_syne.run_moasha(*a, corrected=kind == "moasha_corrected", **k)
        return moasha, cfg
    return replay_arms.run_autotune, cfg


Job = tuple[str, str | None, str, int, int, float, bool]  # workload, task, arm, seed, workers, budget, charge


def one_run(job: Job) -> tuple[Job, Events, float]:
    """A process pool's task: one arm, seed, worker count and task; its events and the real seconds it took."""
    name, task, arm, seed, workers, budget, charge = job
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    import logging

    logging.getLogger("syne_tune").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    run, cfg = runner(arm, SPACES[name])
    from autotune.search import predicted

    saved = {k: getattr(predicted, k) for k in CONSTANTS.get(arm, {})}
    try:
        for k, v in CONSTANTS.get(arm, {}).items():
            setattr(predicted, k, v)
        ev = run(cfg, workload(name, task), seed, budget, workers, charge)
    finally:
        for k, v in saved.items():
            setattr(predicted, k, v)
    return job, ev, time.perf_counter() - t0


# ---------------------------------------------------------------- tables


Runs = dict[tuple[str | None, int, str], list[Events]]  # (task, workers, arm) -> events per seed


def all_measures(name: str, runs: Runs, budgets: dict[tuple[str | None, int], float]) -> dict[tuple[str | None, int,
                                                                                                   str], list[Seed]]:
    out = {}
    for (task, n, arm), rs in runs.items():
        front, t_ref = reference(name, task)
        out[(task, n, arm)] = [measures(ev, front, t_ref, budgets[(task, n)]) for ev in rs]
    return out


def fmt_x(x: tuple[float, float, float]) -> str:
    return f"{x[0]:.2f}x [{x[1]:.2f}, {x[2]:.2f}]"


def report(name: str, workers: int, tasks: list[str | None], arms: list[str], ms: dict[tuple[str | None, int, str],
           list[Seed]], budgets: dict[tuple[str | None, int], float], seeds: Sequence[int]) -> dict[str, Any]:
    """Print the tables of one worker count; return their figures (for --json)."""
    counts = sorted({len(v) for (t, n, _), v in ms.items() if n == workers and t in tasks})
    print(f"\n{name}, {workers} worker{'s' if workers > 1 else ''}, seeds {seeds[0]}-{seeds[-1]} "
          f"({'-'.join(map(str, dict.fromkeys([counts[0], counts[-1]])))} per task), "
          f"{len(tasks)} task{'s' if len(tasks) > 1 else ''}; budget per task "
          + (f"{BUDGET_TRIALS:g} x its median 52-epoch time{' / workers x 2' if workers > 1 else ''}"
             if name == "lcbench" else f"{budgets[(None, workers)]:g} simulated s"))
    print("counting rule (every arm): completed trials; a stopped trial only where its values are the configuration "
          "with epochs: k (never on LCBench: epochs fixed)")
    summary(workers, tasks, arms, ms, budgets)
    out: dict[str, Any] = {}
    bases = [b for b in BASELINES if b in arms]
    replay_match.tables(ms, tasks, workers, arms, bases, budgets, SHORT, out)
    for v in HV:
        for q in TARGETS:
            print(f"\nspeed-up to {int(100 * q)} % ({v} time): RMST(baseline) / RMST(arm), "
                  + ("median over tasks [95 % interval] (tasks with interval > 1)" if len(tasks) > 1
                     else "[95 % paired interval]"))
            print(f"{'arm':<32}" + "".join(f"{'vs ' + SHORT.get(b, b):>30}" for b in bases))
            for arm in arms:
                cells = [speedup(workers, tasks, ms, budgets, v, q, arm, b, out) if b != arm else "-" for b in bases]
                print(f"{arm:<32}" + "".join(f"{c:>30}" for c in cells))
    for what, get in (("best accuracy at the end", lambda s: s.best_acc),
                      ("hypervolume share at the end (linear time)", lambda s: s.hv_end["lin"]),
                      ("hypervolume share at the end (log time)", lambda s: s.hv_end["log"])):
        print(f"\n{what}: mean paired difference (arm - baseline) [95 % interval]"
              + (", median over tasks (tasks whose interval is above 0 / below 0)" if len(tasks) > 1 else ""))
        print(f"{'arm':<32}" + "".join(f"{'vs ' + SHORT.get(b, b):>30}" for b in bases))
        for arm in arms:
            cells = [difference(workers, tasks, ms, get, arm, b, f"{what}|{workers}|{arm}|{b}", out) if b != arm
                     else "-" for b in bases]
            print(f"{arm:<32}" + "".join(f"{c:>30}" for c in cells))
    return out


def summary(workers: int, tasks: list[str | None], arms: list[str], ms: dict[tuple[str | None, int, str], list[Seed]],
            budgets: dict[tuple[str | None, int], float]) -> None:
    """Per arm, over tasks: RMST / budget per view and target, hits, HV at the end, best accuracy, trials, stopped."""
    head = f"{'arm':<32}" + "".join(f"{f'RMST {int(100 * q)}% {v}':>15}" for v in HV for q in TARGETS)
    print(head + f"{'hits 90/95':>12}{'HV end':>8}{'HV log':>8}{'best acc':>10}{'trials':>8}{'stopped':>9}")
    for arm in arms:
        cells = []
        for v in HV:
            for q in TARGETS:
                shares = [rmst([s.to[(v, q)] for s in ms[(t, workers, arm)]], budgets[(t, workers)])
                          / budgets[(t, workers)] for t in tasks]
                cells.append(f"{statistics.median(shares):>15.3f}")
        every = [s for t in tasks for s in ms[(t, workers, arm)]]
        hits = [sum(math.isfinite(s.to[("lin", q)]) for s in every) for q in TARGETS]
        print(f"{arm:<32}" + "".join(cells) + f"{f'{hits[0]}/{len(every)} {hits[1]}/{len(every)}':>12}"
              + f"{statistics.median(s.hv_end['lin'] for s in every):>8.3f}"
              + f"{statistics.median(s.hv_end['log'] for s in every):>8.3f}"
              + f"{statistics.median(s.best_acc for s in every):>10.4f}"
              + f"{statistics.median(s.trials for s in every):>8.0f}"
              + f"{statistics.median(s.stopped for s in every):>9.0f}")
    print("RMST q% view: restricted mean time to q % of the reference hypervolume (linear or log time) / budget, "
          "median over tasks; hits: seeds x tasks that got there (linear); HV end, HV log, best acc, trials, stopped: "
          "medians over seeds x tasks")


def speedup(workers: int, tasks: list[str | None], ms: dict[tuple[str | None, int, str], list[Seed]],
            budgets: dict[tuple[str | None, int], float], v: str, q: float, arm: str, base: str,
            out: dict[str, Any]) -> str:
    per = [([s.to[(v, q)] for s in ms[(t, workers, base)]], [s.to[(v, q)] for s in ms[(t, workers, arm)]],
            budgets[(t, workers)]) for t in tasks]
    if len(tasks) == 1:
        x, above = paired_ratio(*per[0]), None
        cell = fmt_x(x)
    else:
        x = median_ratio(per)
        above = sum(paired_ratio(*p)[1] > 1 for p in per)
        cell = f"{fmt_x(x)} ({above}/{len(tasks)})"
    out[f"x|{workers}|{v}|{q}|{arm}|{base}"] = [*x, above]
    return cell


def difference(workers: int, tasks: list[str | None], ms: dict[tuple[str | None, int, str], list[Seed]],
               get: Callable[[Seed], float], arm: str, base: str, key: str, out: dict[str, Any]) -> str:
    ds = [paired_diff([get(s) for s in ms[(t, workers, base)]], [get(s) for s in ms[(t, workers, arm)]])
          for t in tasks]
    out[key] = ds
    if len(tasks) == 1:
        return f"{ds[0][0]:+.4f} [{ds[0][1]:+.4f}, {ds[0][2]:+.4f}]"
    up, down = sum(d[1] > 0 for d in ds), sum(d[2] < 0 for d in ds)
    return f"{statistics.median(d[0] for d in ds):+.4f} ({up}/{down} of {len(tasks)})"


def curves(ms: dict[tuple[str | None, int, str], list[Seed]], workers: list[int], arms: list[str]) -> dict[str, Any]:
    """Anytime hypervolume share (linear), median and quartiles over tasks x seeds, per worker count and arm."""
    import numpy as np

    out: dict[str, Any] = {"grid": [(i + 1) / GRID for i in range(GRID)], "curves": {}}
    for n in workers:
        for arm in arms:
            rows = np.array([s.anytime for (t, w, a), ss in ms.items() if w == n and a == arm for s in ss])
            q = np.percentile(rows, [25, 50, 75], axis=0)
            out["curves"][f"{n}|{arm}"] = {"q25": q[0].round(4).tolist(), "median": q[1].round(4).tolist(),
                                           "q75": q[2].round(4).tolist()}
    return out


def load(paths: Sequence[Path], arms: Sequence[str]) -> tuple[Runs, list[int]]:
    """Saved runs (--save), merged: the arms among `arms`; files holding other seeds of the same task, worker count
    and arm add theirs (a long run saved block by block). Within a task and worker count only the seeds every arm
    ran are kept (the measures pair arms by seed); returns the runs, each arm's events in seed order, and every seed
    kept anywhere."""
    by_seed: dict[tuple[str | None, int, str], dict[int, Events]] = {}
    for p in paths:
        saved = json.loads(p.read_text())
        for key, rs in saved["runs"].items():
            task, n, arm = key.split("|")
            if arm in arms:
                got = by_seed.setdefault((None if task == "" else task, int(n), arm), {})
                got.update({s: [tuple(e) for e in ev] for s, ev in zip(saved["seeds"], rs)})  # type: ignore[misc]
    runs: Runs = {}
    kept: set[int] = set()
    for tn in {(t, n) for t, n, _ in by_seed}:
        mine = {a: by_seed[(tn[0], tn[1], a)] for t, n, a in by_seed if (t, n) == tn}
        common = sorted(set.intersection(*(set(v) for v in mine.values())))
        kept.update(common)
        for a, v in mine.items():
            runs[(tn[0], tn[1], a)] = [v[s] for s in common]
    return runs, sorted(kept)


def part_file(folder: Path, task: str | None, workers: int, seeds: Sequence[int]) -> Path:
    """Where `--save-each` keeps one task's runs at one worker count (a finished part is not run again)."""
    return folder / f"rep_{task or 'all'}_w{workers}_s{seeds[0]}-{seeds[-1]}.json"


def save(path: Path, name: str, seeds: Sequence[int], runs: Runs) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"workload": name, "seeds": list(seeds), "runs": {
        f"{t or ''}|{n}|{a}": rs for (t, n, a), rs in runs.items()}}))
    tmp.replace(path)


def run_all(name: str, tasks: list[str | None], arms: list[str], seeds: list[int], workers: list[int], charge: bool,
            jobs: int, real: dict[str, float], t0: float, each: Path | None = None) -> Runs:
    """Every (worker count, task, seed, arm) run in a process pool; `real`: each arm's real seconds, added up.
    `each`: a folder where every (task, worker count) is saved once its runs are done, and skipped if it is there
    (a long run, resumable; its tables come from `--load` of the folder's files)."""
    parts = [(n, t) for n in workers for t in tasks
             if each is None or not part_file(each, t, n, seeds).exists()]
    todo: list[Job] = [(name, t, a, s, n, budget_of(name, t, n), charge)
                       for n, t in parts for s in seeds for a in arms]
    runs: Runs = {(t, n, a): [[] for _ in seeds] for n, t in parts for a in arms}
    left = {(n, t): len(seeds) * len(arms) for n, t in parts}
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        for i, ((_, t, arm, seed, n, _, _), ev, took) in enumerate(pool.map(one_run, todo, chunksize=1), 1):
            runs[(t, n, arm)][seed - seeds[0]] = ev
            real[arm] += took
            left[(n, t)] -= 1
            if each is not None and not left[(n, t)]:
                save(part_file(each, t, n, seeds), name, seeds, {k: v for k, v in runs.items() if k[:2] == (t, n)})
                print(f"  saved {part_file(each, t, n, seeds).name}, {time.perf_counter() - t0:.0f}s "
                      f"(load {os.getloadavg()[0]:.1f})", flush=True)
            if i % max(1, len(todo) // 20) == 0 or i == len(todo):
                print(f"  {i}/{len(todo)} runs, {time.perf_counter() - t0:.0f}s", flush=True)
    return runs


def main(argv: list[str] | None = None) -> None:
    global BUDGET_TRIALS
    argv = sys.argv[1:] if argv is None else argv
    if "--report" in argv:  # the sized, resumable report command (bench/replay_report.py)
        from bench import replay_report

        replay_report.main(argv)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="lcbench", choices=sorted(SPACES))
    ap.add_argument("--tasks", default="dev", help="LCBench: dev, report, all, or comma-separated task ids")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed-start", type=int, default=None,
                    help=f"first seed (default: {REPORT_SEED} for --tasks report, else 0)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--budget-trials", type=float, default=BUDGET_TRIALS,
                    help="LCBench: the 1-worker budget in median 52-epoch times of the task")
    ap.add_argument("--arms", default=None, help=f"comma-separated (default: the peers and autotune), of: "
                                                 f"{', '.join(ARMS)}")
    ap.add_argument("--free-strategy", action="store_true", help="charge only the workload's time, not the arms' own")
    ap.add_argument("--save", type=Path, default=None, help="write every run's events here (JSON)")
    ap.add_argument("--save-each", type=Path, default=None, help="a folder: each task and worker count saved there as "
                                                                 "soon as it is done, and not run again if it is")
    ap.add_argument("--load", type=Path, nargs="*", default=[], help="tables from saved runs instead of running")
    ap.add_argument("--curves", type=Path, default=None, help="write the anytime curves here (JSON)")
    ap.add_argument("--json", type=Path, default=None, help="write the tables' figures here (JSON)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (the clock is simulated: "
                                                                          "running arms side by side changes nothing)")
    args = ap.parse_args(argv)
    BUDGET_TRIALS = args.budget_trials
    arms = [a for a in args.arms.split(",") if a] if args.arms is not None else list(DEFAULT_ARMS)
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"replay.py: --arms: unknown {', '.join(unknown)}; known: {', '.join(ARMS)}")
    tasks = task_list(args.workload, args.tasks)
    start = args.seed_start if args.seed_start is not None else (REPORT_SEED if args.tasks == "report" else 0)
    seeds = list(range(start, start + args.seeds))
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    real: dict[str, float] = {a: 0.0 for a in arms}
    if args.load:
        runs, seeds = load(args.load, arms)
        tasks = sorted({k[0] for k in runs}, key=lambda t: (t is None, t or ""))
        args.workers = sorted({k[1] for k in runs})
    else:
        print(f"replay: {args.workload}, {len(tasks)} task(s), {len(arms)} arms x {len(seeds)} seeds x workers "
              f"{args.workers}, {args.jobs} processes; the arms' own CPU time "
              f"{'not charged' if args.free_strategy else 'charged'}", flush=True)
        if args.save_each:
            args.save_each.mkdir(parents=True, exist_ok=True)
        runs = run_all(args.workload, tasks, arms, seeds, args.workers, not args.free_strategy, args.jobs, real, t0,
                       args.save_each)
        if args.save:
            save(args.save, args.workload, seeds, runs)
        if args.save_each:  # the tables of every part in the folder, the ones run before included
            runs, seeds = load(sorted(args.save_each.glob("rep_*.json")), arms)
            tasks = sorted({k[0] for k in runs}, key=lambda t: (t is None, t or ""))
            args.workers = sorted({k[1] for k in runs})
    budgets = {(t, n): budget_of(args.workload, t, n) for t in tasks for n in args.workers}
    ms = all_measures(args.workload, runs, budgets)
    figures: dict[str, Any] = {}
    for n in args.workers:
        figures.update(report(args.workload, n, tasks, arms, ms, budgets, seeds))
    if args.curves:
        args.curves.write_text(json.dumps({"workload": args.workload, "tasks": tasks, "seeds": seeds,
                                           **curves(ms, args.workers, arms)}))
    if args.json:
        args.json.write_text(json.dumps(figures))
    if not args.load:
        print("\nreal seconds per arm (all its runs): " + ", ".join(f"{a} {s:.0f}" for a, s in real.items()))
    print(f"total {time.perf_counter() - t0:.0f}s; load average at start {load0[0]:.1f}, at end "
          + " ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
