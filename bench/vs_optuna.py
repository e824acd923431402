"""autotune against plain Optuna and random search: who reaches the speed-accuracy front first, and how much sooner?

Every arm searches the same joint space (bench/time_to_target.py's SPACE: hyper-parameters and acceleration
settings) for validation accuracy up and training time down, through the same trainer, under an equal wall
budget per seed, in a rotated order per seed (a shared machine's load falls on all arms alike), torch on one
thread:
- plain Optuna: what a user writes without autotune: `optuna.create_study(directions=[max, min])` (its default
  sampler, multi-objective TPE, seeded), an objective calling `autotune.train` on the sampled params, no pruning
  (Optuna cannot prune with several objectives);
- random search: the same hand-written objective with Optuna's RandomSampler (plain, not autotune: it measures
  the sampler alone);
- autotune: `autotune.run` with autotune's defaults (pruner auto = pareto_asha, strategy joint, candidates auto: a
  pool of 256 candidates per trial while choosing costs at most 2 % of a trial's training time, else one);
- candidates for the defaults (`--arms` picks): probe_then_tune; pareto_asha; one candidate (pareto_asha with
  study.candidates 1, the default before issue 42) and predicted front (a pool of 8 candidates per trial chosen by their
  predicted objectives: search/predicted.py); forecast (the Pareto pruner judging learning-curve forecasts, plus
  `slow.min_front_gain` before training).

The measure: the hypervolume of a study's (training time, error) front as the wall clock runs (trials ending
after the budget do not count), against a reference: the hypervolume of the union of every arm's and seed's
front (reference point: error 1, 1.1 x the slowest training time on that union front). Per arm (medians over
seeds, and in how many seeds it got there): the wall time to 90% and 95% of the reference, the hypervolume at
the end, the best accuracy, trials run and stopped early; and the speed-up as DEHB reports it (Awad et al.
2021): how much sooner this arm reached what the baseline reached at the end of its budget, budget / this arm's
time to the baseline's final hypervolume, per seed ("never": it did not get there in its own budget).

    python bench/vs_optuna.py [--budget 120] [--seeds 5] [--tasks mnist1d] [--arms "plain Optuna,autotune"]

The default is the real wall-clock cross-check of the replay (issue 48): MNIST-1D (search_spaces/mnist1d.yaml),
plain Optuna MO-TPE against autotune's default, 5 seeds x 120 s x 2 arms (about 22 minutes with the warm-up and
each run's start): run it alone on the machine (the load average is printed before and after). Per seed, each
arm's best accuracy and time to 90 % of the reference; then time to 90 % as a ratio, RMST(baseline) / RMST(arm)
with a 95 % paired bootstrap interval over seeds (a seed that never got there counts the budget: bench/replay.py's
paired_ratio), and the goals: >= 2x to 90 % (met only where the interval's lower end clears 2), best accuracy no
lower than plain Optuna's in the median over seeds.

A task is one of time_to_target's (digits, image, hard) or any search_spaces/NAME.yaml (its data and model
sections, e.g. mnist1d when that file exists).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import time_to_target as ttt  # noqa: E402

Event = tuple  # (seconds since start, accuracy or None, training time or None, state name): ttt.events
ARMS: dict[str, dict[str, Any]] = {
    "plain Optuna": {"kind": "plain", "sampler": "default"},
    "random search": {"kind": "plain", "sampler": "random"},
    "autotune": {"kind": "autotune", "pruning": {}},  # the config's defaults
    "autotune probe_then_tune": {"kind": "autotune", "pruning": {}, "strategy": "probe_then_tune"},
    "autotune pareto_asha": {"kind": "autotune", "pruning": {"pruner": "pareto_asha"}},
    # study.candidates (search/predicted.py): one proposal per trial, run as is (the default before auto), or the
    # best of 8 by their predicted objectives
    "autotune one candidate": {"kind": "autotune", "pruning": {"pruner": "pareto_asha"}, "study": {"candidates": 1}},
    "autotune predicted front": {"kind": "autotune", "pruning": {"pruner": "pareto_asha"},
                                 "study": {"candidates": 8}},
    "autotune forecast": {"kind": "autotune", "pruning": {"pruner": "pareto", "pruner_args": {"forecast": True},
                                                          "slow": {"min_front_gain": 0.01}}},
}
TARGETS = (0.90, 0.95)
BASELINES = ("plain Optuna", "random search")


def task_sections(task: str) -> dict[str, Any]:
    """The data and model sections of `task`: time_to_target's, or search_spaces/TASK.yaml's (with its own space:
    mnist1d searches its architecture)."""
    if task in ttt.TASKS:
        return ttt.TASKS[task]
    path = ROOT / "search_spaces" / f"{task}.yaml"
    if not path.exists():
        names = sorted({*ttt.TASKS, *(p.stem for p in (ROOT / "search_spaces").glob("*.yaml"))})
        raise SystemExit(f"vs_optuna.py: --tasks: unknown task {task!r}; known: {', '.join(names)}")
    raw = yaml.safe_load(path.read_text())
    return {k: raw[k] for k in ("data", "model", "task", "space") if k in raw}


# ---------------------------------------------------------------- the measures (pure: tests/test_bench_vs_optuna.py)


def reference(runs: dict[str, list[list[Event]]]) -> tuple[float, float]:
    """(hypervolume of the union of every front, its time reference: 1.1 x the union front's slowest time)."""
    union = [(e[2], e[1]) for rs in runs.values() for ev in rs for e in ev if e[1] is not None and e[2] is not None]
    if not union:
        return 0.0, math.nan
    t_ref = 1.1 * max(t for t, _ in ttt.front(union))
    return ttt.hypervolume(union, t_ref), t_ref


def final_hv(c: list[tuple[float, float]]) -> float:
    return c[-1][1] if c else 0.0


def speedup(c: list[tuple[float, float]], target_hv: float, budget: float) -> float:
    """DEHB's speed-up: budget / the wall time this curve needs to reach `target_hv` (0.0: never reached; nan: no
    target, the baseline found nothing)."""
    if target_hv <= 0:
        return math.nan
    t = ttt.time_to(c, target_hv)
    return budget / max(t, 1e-9) if math.isfinite(t) else 0.0


def median(xs: Sequence[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


def summarize(runs: dict[str, list[list[Event]]], budget: float) -> dict[str, Any]:
    """Per arm: medians over seeds of time to each target share of the reference (and hits), final hypervolume
    share, best accuracy, trials, stopped; speed-ups against each baseline present (seeds paired by index)."""
    ref, t_ref = reference(runs)
    curves = {arm: [ttt.curve(ev, t_ref) for ev in rs] for arm, rs in runs.items()}
    rows: dict[str, dict[str, Any]] = {}
    for arm, rs in runs.items():
        cs = curves[arm]
        row: dict[str, Any] = {}
        for q in TARGETS:
            ts = [ttt.time_to(c, q * ref) for c in cs] if ref > 0 else [math.inf for _ in cs]
            row[f"to_{int(100 * q)}"] = median(ts) if ts else math.inf
            row[f"hits_{int(100 * q)}"] = sum(1 for t in ts if math.isfinite(t))
            row[f"ts_{int(100 * q)}"] = ts  # per seed (inf: never), for the paired ratio
        row["hv_end"] = median([final_hv(c) / ref for c in cs]) if ref > 0 else math.nan
        row["best_accs"] = [max((e[1] for e in ev if e[1] is not None), default=0.0) for ev in rs]
        row["best_acc"] = median(row["best_accs"])
        row["trials"] = median([len(ev) for ev in rs])
        row["stopped"] = median([sum(1 for e in ev if e[3] == "PRUNED") for ev in rs])
        for base in BASELINES:
            if base in curves and base != arm:
                row[f"speedup vs {base}"] = median([speedup(c, final_hv(b), budget)
                                                    for c, b in zip(cs, curves[base])])
        rows[arm] = row
    return {"reference_hv": ref, "t_ref": t_ref, "rows": rows}


# ---------------------------------------------------------------- running the arms


def run_arm(task: str, arm: str, seed: int, budget: float, tmp: str) -> list[Event]:
    spec = ARMS[arm]
    cfg = ttt.make_cfg(task, f"{task}-{seed}", f"sqlite:///{tmp}/{arm.replace(' ', '_')}-{seed}.db", seed, budget,
                       spec.get("strategy", "joint"), pruning=spec.get("pruning"), sections=task_sections(task),
                       study=spec.get("study"))
    if spec["kind"] == "plain":
        return ttt.run_plain(cfg, spec["sampler"], seed, budget)[1]
    return ttt.run_autotune(cfg)[1]


def fmt_s(x: float, hits: int, n: int, budget: float) -> str:
    return (f"{x:.1f}s" if math.isfinite(x) else f"> {budget:g}s") + f" {hits}/{n}"


def fmt_x(x: float) -> str:
    return "-" if math.isnan(x) else ("never" if x == 0 else f"{x:.2f}x")


def report(task: str, summary: dict[str, Any], budget: float, seeds: int) -> None:
    print(f"\ntask {task}: budget {budget:g}s x {seeds} seeds; reference: union of every front, hypervolume "
          f"{summary['reference_hv']:.4f} (time reference {summary['t_ref']:.2f}s, error reference 1)")
    rows = summary["rows"]
    bases = [b for b in BASELINES if b in rows]
    print(f"{'arm':<26}" + "".join(f"{'to ' + str(int(100 * q)) + '%':>14}" for q in TARGETS)
          + "".join(f"{'vs ' + b.split()[0]:>11}" for b in bases)
          + f"{'HV end':>8}{'best acc':>10}{'trials':>8}{'stopped':>9}")
    for arm, r in rows.items():
        print(f"{arm:<26}" + "".join(f"{fmt_s(r[f'to_{int(100 * q)}'], r[f'hits_{int(100 * q)}'], seeds, budget):>14}"
                                     for q in TARGETS)
              + "".join(f"{fmt_x(r.get(f'speedup vs {b}', math.nan)):>11}" for b in bases)
              + f"{r['hv_end']:>8.3f}{r['best_acc']:>10.4f}{r['trials']:>8.0f}{r['stopped']:>9.0f}")
    print("to q%: median wall time to q x the reference hypervolume (seeds that got there / seeds); vs plain / vs "
          "random: median over seeds of budget / this arm's time to what that baseline had at the end of its budget "
          "(DEHB's speed-up; never: not within the budget); HV end: median final hypervolume / reference")


def per_seed(task: str, summary: dict[str, Any], budget: float, first_seed: int = 0) -> list[str]:
    """Per seed, each arm's best accuracy and time to 90 %; then time to 90 % as a paired ratio against each
    baseline, with its interval; returns the goals' lines (autotune against plain Optuna)."""
    from bench.replay import paired_ratio

    rows = summary["rows"]
    arms = list(rows)
    n = len(next(iter(rows.values()))["best_accs"])
    print(f"\nper seed ({task}): best accuracy / time to 90 % of the reference (never: > {budget:g}s)\n")
    print("| seed | " + " | ".join(arms) + " |\n|---|" + "---|" * len(arms))
    for i in range(n):
        cells = [f"{rows[a]['best_accs'][i]:.4f} / "
                 + (f"{rows[a]['ts_90'][i]:.0f}s" if math.isfinite(rows[a]['ts_90'][i]) else "never") for a in arms]
        print(f"| {first_seed + i} | " + " | ".join(cells) + " |")
    goals: list[str] = []
    for base in [b for b in BASELINES if b in rows]:
        for arm in [a for a in arms if a != base]:
            x = paired_ratio(rows[base]["ts_90"], rows[arm]["ts_90"], budget)
            print(f"\ntime to 90 %, {arm} vs {base}: RMST(baseline) / RMST(arm) {x[0]:.2f}x "
                  f"[{x[1]:.2f}, {x[2]:.2f}] (95 % paired bootstrap over {n} seeds; never: the budget)")
            if (arm, base) == ("autotune", "plain Optuna"):
                goals.append(f"| {task} | >= 2x to 90 % of the front | {x[0]:.2f}x [{x[1]:.2f}, {x[2]:.2f}] | "
                             f"{'met' if x[1] >= 2 else 'not met'} |")
                mine, theirs = median(rows[arm]["best_accs"]), median(rows[base]["best_accs"])
                goals.append(f"| {task} | best accuracy no lower (median over seeds) | {mine:.4f} vs {theirs:.4f} | "
                             f"{'met' if mine >= theirs else 'not met'} |")
    return goals


def loadavg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=120.0, help="wall seconds per arm and seed")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed-start", type=int, default=1000, help="first seed (report seeds start at 1000, as the "
                                                                  "replay's: nothing was chosen on them)")
    ap.add_argument("--tasks", default="mnist1d", help="comma-separated (default: mnist1d; also digits, image, "
                                                       "any search_spaces/NAME)")
    ap.add_argument("--arms", default="plain Optuna,autotune", help=f"comma-separated, of: {', '.join(ARMS)}")
    args = ap.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"vs_optuna.py: --arms: unknown {', '.join(unknown)}; known: {', '.join(ARMS)}")
    tasks = [t for t in args.tasks.split(",") if t]
    for t in tasks:
        task_sections(t)  # an unknown task fails now, not after the first task's runs
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    total = args.budget * args.seeds * len(arms) * len(tasks)
    t_start = time.time()
    goals: list[str] = []
    print(f"vs_optuna: budget {args.budget:g}s x {args.seeds} seeds x {len(arms)} arms x {len(tasks)} tasks "
          f"(about {total / 60:.0f} min), torch 1 thread; load average at start {loadavg()}", flush=True)
    for task in tasks:
        runs: dict[str, list[list[Event]]] = {a: [] for a in arms}
        with tempfile.TemporaryDirectory() as tmp:
            sections = task_sections(task)
            warm = {"epochs": 1}  # data loaded and kernels warm before any clock (a searched model: its first)
            if "model.name" in sections.get("space", {}):
                warm["model.name"] = sections["space"]["model.name"]["choices"][0]
            ttt.autotune.train(ttt.make_cfg(task, "warm", f"sqlite:///{tmp}/w.db", 0, 1.0, sections=sections),
                               params=warm)
            for seed in range(args.seed_start, args.seed_start + args.seeds):
                order = arms[seed % len(arms):] + arms[:seed % len(arms)]
                for arm in order:
                    t0 = time.time()
                    ev = run_arm(task, arm, seed, args.budget, tmp)
                    runs[arm].append(ev)
                    done = [e for e in ev if e[3] == "COMPLETE"]
                    print(f"  {task} seed {seed} {arm}: {len(ev)} trials ({len(done)} complete) in "
                          f"{time.time() - t0:.0f}s, best accuracy "
                          f"{max((e[1] for e in done), default=float('nan')):.4f}", flush=True)
        summary = summarize(runs, args.budget)
        report(task, summary, args.budget, args.seeds)
        goals += per_seed(task, summary, args.budget, args.seed_start)
    if goals:
        print("\n| task | goal (autotune vs plain Optuna) | measured | |\n|---|---|---|---|\n" + "\n".join(goals))
    print(f"\nelapsed {time.time() - t_start:.0f}s; load average at end {loadavg()}")


if __name__ == "__main__":
    main()
