"""The replay benchmark: every strategy on recorded learning curves, simulated clock, many seeds, in minutes.

    python bench/replay.py --workload mnist1d --seeds 20 --workers 1 8 [--budget 90] [--arms ...] [--jobs 2]

Without --arms: the peers and autotune's default (DEFAULT_ARMS; about 8 minutes on 2 cores); every other
strategy measured in bench/RESULTS.md is an arm to name.

Each arm (bench/replay_arms.py, bench/replay_syne.py) searches the recorded space (bench/recordings/NAME.jsonl.gz,
made by bench/replay_record.py) for validation accuracy up and training time down, each trial answered by the
recording (bench/replay_workload.py) and charged to a simulated clock with N workers (bench/replay_backend.py);
the same budget in simulated seconds, the same seeds, for every arm. An Optuna arm's own CPU time (its sampler,
pruner and records) is charged to its clock as well, as a real study pays it (`--free-strategy`: not charged).

The measure is bench/vs_optuna.py's: the hypervolume of the (training time, error) front of the trials completed
so far, against a reference: the union of every arm's, seed's and worker count's front (error reference 1, time
reference 1.1 x the union front's slowest training time). Per arm and worker count: the median simulated time to
90 % and 95 % of the reference (with a 90 % bootstrap interval over seeds), how many seeds got there, and each
baseline's median time over this arm's (the speed-up; > 1: this arm sooner; its 90 % bootstrap interval: seeds
resampled per arm); the hypervolume and best accuracy at the end; trials and how many were stopped early.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
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

from bench import replay_arms, replay_syne  # noqa: E402
from bench import time_to_target as ttt  # noqa: E402
from bench.replay_workload import RECORDINGS, Workload  # noqa: E402

Events = replay_arms.Events
SPACES = {"mnist1d": "search_spaces/mnist1d.yaml", "digits": "search_spaces/cnn.yaml"}
# name -> (runner, pruning over the space's own, study over its own); None: not an autotune arm
# the arms named before stopped_as_shorter (search/credit.py) and candidates (search/predicted.py) became the
# defaults keep their meaning: without them
OLD = {"stopped_as_shorter": False}
ONE = {"candidates": 1}
ARMS: dict[str, tuple[str, dict[str, Any] | None, dict[str, Any]]] = {
    "plain Optuna": ("plain", None, {}),
    "random search": ("random", None, {}),
    "Optuna + Pareto-rank pruner": ("pareto_rank", None, {}),
    "Syne Tune MOASHA": ("moasha", None, {}),
    "Syne Tune MOASHA + stopped results": ("moasha_all", None, {}),
    "autotune pareto": ("autotune", {"pruner": "pareto", **OLD}, ONE),
    "autotune pareto_asha": ("autotune", {"pruner": "pareto_asha", **OLD}, ONE),
    "autotune forecast": ("autotune", {"pruner": "pareto", "pruner_args": {"forecast": True}, **OLD}, ONE),
    "autotune forecast + front gain": ("autotune", {"pruner": "pareto", "pruner_args": {"forecast": True}, **OLD,
                                                   "slow": {"min_front_gain": 0.01}}, ONE),
    "autotune pareto_asha + front gain": ("autotune", {"pruner": "pareto_asha", **OLD,
                                                      "slow": {"min_front_gain": 0.01}}, ONE),
    "autotune pareto keep leaders": ("autotune", {"pruner": "pareto", "pruner_args": {"keep_leaders": 0.25},
                                                  **OLD}, ONE),
    "autotune pareto_asha + stopped as shorter": ("autotune", {"pruner": "pareto_asha", "stopped_as_shorter": True},
                                                  ONE),
    "autotune pareto + stopped as shorter": ("autotune", {"pruner": "pareto", "stopped_as_shorter": True}, ONE),
    # + the predicted front: the best of K proposals by predicted objectives (study.candidates; default 1: off)
    "autotune predicted front 4": ("autotune", {"pruner": "pareto_asha"}, {"candidates": 4}),
    "autotune predicted front 8": ("autotune", {"pruner": "pareto_asha"}, {"candidates": 8}),
    "autotune predicted front 16": ("autotune", {"pruner": "pareto_asha"}, {"candidates": 16}),
    "autotune no pruning": ("autotune", {"pruner": "none", **OLD}, ONE),
    "autotune pareto_asha eta 2": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"reduction_factor": 2},
                                                **OLD}, ONE),
    "autotune pareto_asha from epoch 2": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"min_epochs": 2},
                                                       **OLD}, ONE),
    "autotune pareto_asha 6 startup": ("autotune", {"pruner": "pareto_asha", "pruner_args": {"n_startup_trials": 6},
                                                    **OLD}, ONE),
}
# what `python bench/replay.py` runs without --arms: the peers and autotune's default (pareto_asha, stopped trials
# shown as shorter, one candidate): 1 and 8 workers x 20 seeds in about 8 minutes on 2 cores
DEFAULT_ARMS = ("plain Optuna", "random search", "Optuna + Pareto-rank pruner", "Syne Tune MOASHA",
                "Syne Tune MOASHA + stopped results", "autotune pareto_asha + stopped as shorter")
BASELINES = ("plain Optuna", "random search", "Optuna + Pareto-rank pruner", "Syne Tune MOASHA",
             "Syne Tune MOASHA + stopped results")
SHORT = {"plain Optuna": "plain", "random search": "random", "Optuna + Pareto-rank pruner": "Pareto-rank",
         "Syne Tune MOASHA": "MOASHA", "Syne Tune MOASHA + stopped results": "MOASHA+stopped"}
TARGETS = (0.90, 0.95)


def loaded(paths: Sequence[Path], arms: Sequence[str]) -> dict[int, dict[str, list[Events]]]:
    """Saved runs (--save), merged: per worker count, per arm (of `arms` where saved), its seeds' events."""
    out: dict[int, dict[str, list[Events]]] = {}
    for p in paths:
        for n, by in json.loads(p.read_text())["runs"].items():
            for arm, rs in by.items():
                if arm in arms:
                    out.setdefault(int(n), {})[arm] = [[tuple(e) for e in ev] for ev in rs]
    return out


@cache
def workload(name: str) -> Workload:
    return Workload.load(RECORDINGS / f"{name}.jsonl.gz")


def runner(arm: str, space_file: str) -> tuple[Callable[..., Events], Any]:
    kind, pruning, study = ARMS[arm]
    cfg = replay_arms.variant(space_file, pruning, **study)
    if kind == "plain":
        return replay_arms.plain("tpe"), cfg
    if kind == "random":
        return replay_arms.plain("random"), cfg
    if kind == "pareto_rank":
        return replay_arms.plain("tpe", pruned=True), cfg
    if kind == "moasha":
        return replay_syne.run_moasha, cfg
    if kind == "moasha_all":
        return functools.partial(replay_syne.run_moasha, stopped_count=True), cfg
    return replay_arms.run_autotune, cfg


def one_run(job: tuple[str, str, int, int, float, bool]) -> tuple[tuple[str, int, int], Events, float]:
    """(arm, workers, seed), its events, the real seconds it took (a process pool's task)."""
    name, arm, seed, workers, budget, charge = job
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    import logging

    logging.getLogger("syne_tune").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    run, cfg = runner(arm, SPACES[name])
    ev = run(cfg, workload(name), seed, budget, workers, charge)
    return (arm, workers, seed), ev, time.perf_counter() - t0


# ---------------------------------------------------------------- the measures (pure: tests/test_bench_replay.py)


def reference(runs: dict[Any, list[Events]]) -> tuple[float, float]:
    union = [(e[2], e[1]) for rs in runs.values() for ev in rs for e in ev if e[1] is not None and e[2] is not None]
    if not union:
        return 0.0, math.nan
    t_ref = 1.1 * max(t for t, _ in ttt.front(union))
    return ttt.hypervolume(union, t_ref), t_ref


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def interval(xs: Sequence[float], stat: Callable[[Sequence[float]], float] = median, n: int = 2000,
             seed: int = 0) -> tuple[float, float]:
    """The 90 % bootstrap interval of `stat` over `xs` (resampled with replacement)."""
    if not xs:
        return math.nan, math.nan
    rng = random.Random(seed)
    vals = sorted(stat([rng.choice(xs) for _ in xs]) for _ in range(n))
    return vals[int(0.05 * n)], vals[int(0.95 * n) - 1]


def ratio_interval(base: Sequence[float], mine: Sequence[float], n: int = 2000, seed: int = 0) -> tuple[float, float,
                                                                                                      float]:
    """median(base) / median(mine), with its 90 % bootstrap interval (each arm's seeds resampled on their own)."""
    def r(b: Sequence[float], m: Sequence[float]) -> float:
        mb, mm = median(b), median(m)
        if math.isinf(mm):
            return 0.0 if math.isfinite(mb) else math.nan
        return math.inf if math.isinf(mb) else mb / max(mm, 1e-9)

    rng = random.Random(seed)
    vals = [r([rng.choice(base) for _ in base], [rng.choice(mine) for _ in mine]) for _ in range(n)]
    vals = sorted(v for v in vals if not math.isnan(v))
    if not vals:
        return math.nan, math.nan, math.nan
    return r(base, mine), vals[int(0.05 * len(vals))], vals[int(0.95 * len(vals)) - 1]


def summarize(runs: dict[str, list[Events]], ref: float, t_ref: float) -> dict[str, dict[str, Any]]:
    """Per arm (seeds of one worker count): times to each target with intervals, speed-ups against each baseline
    present, hypervolume and best accuracy at the end, trials, stopped."""
    times: dict[str, dict[float, list[float]]] = {}
    rows: dict[str, dict[str, Any]] = {}
    for arm, rs in runs.items():
        cs = [ttt.curve(ev, t_ref) for ev in rs]
        times[arm] = {q: [ttt.time_to(c, q * ref) if ref > 0 else math.inf for c in cs] for q in TARGETS}
        row: dict[str, Any] = {}
        for q in TARGETS:
            ts = times[arm][q]
            row[f"to_{q}"] = (median(ts), *interval(ts))
            row[f"hits_{q}"] = sum(1 for t in ts if math.isfinite(t))
        row["hv_end"] = median([(c[-1][1] if c else 0.0) / ref for c in cs]) if ref > 0 else math.nan
        row["best_acc"] = median([max((e[1] for e in ev if e[1] is not None), default=0.0) for ev in rs])
        row["trials"] = median([len(ev) for ev in rs])
        row["stopped"] = median([sum(1 for e in ev if e[3] == "PRUNED") for ev in rs])
        rows[arm] = row
    for arm in rows:
        for base in BASELINES:
            if base in times and base != arm:
                for q in TARGETS:
                    rows[arm][f"x_{base}_{q}"] = ratio_interval(times[base][q], times[arm][q])
    return rows


def fmt_t(m: tuple[float, float, float], hits: int, n: int) -> str:
    med, lo, hi = m
    if not math.isfinite(med):
        return f"never {hits}/{n}"
    return f"{med:.1f} [{lo:.1f},{'inf' if math.isinf(hi) else f'{hi:.1f}'}] {hits}/{n}"


def fmt_x(x: tuple[float, float, float] | None) -> str:
    if x is None or math.isnan(x[0]):
        return "-"

    def one(v: float) -> str:
        return "inf" if math.isinf(v) else f"{v:.2f}"

    return f"{one(x[0])}x [{one(x[1])},{one(x[2])}]"


def report(name: str, workers: int, rows: dict[str, dict[str, Any]], seeds: int, budget: float) -> None:
    print(f"\n{name}, {workers} worker{'s' if workers > 1 else ''}, {budget:g} simulated s x {seeds} seeds")
    head = f"{'arm':<36}" + "".join(f"{'to ' + str(int(100 * q)) + '% (s) [90% CI] hits':>30}" for q in TARGETS)
    print(head + f"{'HV end':>8}{'best acc':>10}{'trials':>8}{'stopped':>9}")
    for arm, r in rows.items():
        print(f"{arm:<36}" + "".join(f"{fmt_t(r[f'to_{q}'], r[f'hits_{q}'], seeds):>30}" for q in TARGETS)
              + f"{r['hv_end']:>8.3f}{r['best_acc']:>10.4f}{r['trials']:>8.0f}{r['stopped']:>9.0f}")
    bases = [b for b in BASELINES if b in rows]
    for q in TARGETS:
        print(f"\nspeed-up to {int(100 * q)}% (baseline's median time / arm's; [90% bootstrap interval]):")
        print(f"{'arm':<36}" + "".join(f"{'vs ' + SHORT.get(b, b):>24}" for b in bases))
        for arm, r in rows.items():
            print(f"{arm:<36}" + "".join(f"{fmt_x(r.get(f'x_{b}_{q}')):>24}" for b in bases))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="mnist1d", choices=sorted(SPACES))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--budget", type=float, default=90.0, help="simulated seconds per arm and seed (1 worker)")
    ap.add_argument("--budget-8", type=float, default=None,
                    help="simulated seconds with several workers (default: the budget / workers x 2)")
    ap.add_argument("--arms", default=None,
                    help=f"comma-separated (default: the peers and autotune's default; with --load, every saved arm), "
                         f"of: {', '.join(ARMS)}")
    ap.add_argument("--free-strategy", action="store_true",
                    help="charge only the recorded training, not the Optuna arms' own CPU time (sampler, pruner)")
    ap.add_argument("--save", type=Path, default=None, help="write every run's events here (JSON)")
    ap.add_argument("--load", type=Path, nargs="*", default=[], help="tables from saved runs instead of running")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (the clock is simulated: "
                                                                          "running arms side by side changes nothing)")
    args = ap.parse_args(argv)
    arms = ([a for a in args.arms.split(",") if a] if args.arms is not None
            else list(ARMS) if args.load else list(DEFAULT_ARMS))
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"replay.py: --arms: unknown {', '.join(unknown)}; known: {', '.join(ARMS)}")
    w = workload(args.workload)
    print(f"replay: {args.workload} ({len(w.curves)} recorded configurations, {w.header.get('machine', {}).get('cpu')}"
          f", clock: {w.header.get('clock', '?').split(':')[0]}), {len(arms)} arms x {args.seeds} seeds x workers "
          f"{args.workers}, {args.jobs} processes; the strategy's own CPU time "
          f"{'not charged' if args.free_strategy else 'charged'}", flush=True)

    def budget(workers: int) -> float:
        return args.budget if workers == 1 else (args.budget_8 or args.budget * 2 / workers)

    t0 = time.perf_counter()
    real: dict[str, float] = {a: 0.0 for a in arms}
    if args.load:
        runs = loaded(args.load, arms)
        args.workers = sorted(runs)
        args.seeds = min(len(rs) for by in runs.values() for rs in by.values())
    else:
        charge = not args.free_strategy
        jobs = [(args.workload, a, s, n, budget(n), charge)
                for n in args.workers for s in range(args.seeds) for a in arms]
        runs = {n: {a: [[] for _ in range(args.seeds)] for a in arms} for n in args.workers}
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for i, ((arm, n, seed), ev, took) in enumerate(pool.map(one_run, jobs), start=1):
                runs[n][arm][seed] = ev
                real[arm] += took
                if i % max(1, len(jobs) // 20) == 0 or i == len(jobs):
                    print(f"  {i}/{len(jobs)} runs, {time.perf_counter() - t0:.0f}s", flush=True)
        if args.save:
            args.save.write_text(json.dumps({"workload": args.workload, "budget": {n: budget(n) for n in args.workers},
                                             "runs": {str(n): by for n, by in runs.items()}}))
    ref, t_ref = reference({(n, a): rs for n, by in runs.items() for a, rs in by.items()})
    print(f"reference: union of every front, hypervolume {ref:.4f} (time reference {t_ref:.2f}s, error reference 1)")
    for n in args.workers:
        report(args.workload, n, summarize(runs[n], ref, t_ref), args.seeds, budget(n))
    print("\nreal seconds per arm (all its runs): " + ", ".join(f"{a} {s:.0f}" for a, s in real.items()))
    print(f"total {time.perf_counter() - t0:.0f}s; load average at end "
          + " ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
