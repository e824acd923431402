"""The replay benchmark's report on LCBench, sized to 2 cores, resumable: the tables bench/RESULTS.md shows.

    python bench/replay.py --workload lcbench --report [--jobs 2]                   # the report: budget 20
    python bench/replay.py --workload lcbench --report --budgets 20 60 [--jobs 2]   # + budget 60, from the same cache
    python bench/replay.py --workload lcbench --report --full --jobs 16             # 50 seeds everywhere (16 cores)

Blocks (REPORT tasks, seeds from REPORT_SEED: nothing was chosen on them): a budget of 20 median full-training
times at 1 worker on all 26 report tasks x 3 seeds; at 8 workers (budget / 8 x 2) every other report task (13) x
1 seed: the report the 20 minutes on 2 cores were set for. `--budgets 20 60` adds a budget of 60 at 1 worker on
every fourth report task (7) x 1 seed (about a sixth of the CPU more; the budget-20 cells are read from the cache,
so run it after the report); 60 at 8 workers: --full only.
`--full`: every block, 60 at 8 workers too, on all 26 tasks x 50 seeds (CPU seconds per cell measured:
bench/RESULTS.md; hours on 16 cores). Arms: plain Optuna MO-TPE, the OptunaHub rule, rank-corrected MOASHA (the
goals' baselines) and autotune; `--arms` adds others.

Each (block, task, seed, arm) cell is a file in the cache folder (`--cache`, default
studies/replay-report/<fingerprint>/, the fingerprint a hash of the code every arm runs: autotune/, bench/replay*.py,
the LCBench files, the versions of Optuna and Syne Tune), written when the cell ends: a re-run skips every finished
cell, and a change to the code starts a fresh folder (no stale arm is ever mixed in). A cell's file keeps its
events and its process CPU seconds (the cost this command was sized by: CPU, not wall, the machine being shared).

The tables are markdown, to paste into bench/RESULTS.md: per block a summary, time to match and the anytime
hypervolume (bench/replay_match.py), speed-ups to 90 / 95 % of the fixed reference (linear time), best accuracy;
then the goals, met only where the interval's lower end clears them; then the command's elapsed time and load.
LCBench's untrained epoch 1 is dropped for every arm (bench/replay_lcbench.py: epoch 2 is the first fidelity).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import replay as R
from bench import replay_match as rm

REPORT_ARMS = ("plain Optuna", "OptunaHub multi_metric_pruner", "MOASHA rank-corrected", "autotune")


@dataclass(frozen=True)
class Block:
    workers: int
    budget_trials: float
    tasks: tuple[str, ...]
    seeds: tuple[int, ...]

    @property
    def tag(self) -> str:
        return f"{self.workers} worker{'s' if self.workers > 1 else ''}, budget {self.budget_trials:g}"


def plan(full: bool, seeds: int, seeds_small: int, tasks_small: int, tasks_budget: int, budgets: list[float],
         workers: list[int]) -> list[Block]:
    """The blocks: (the first worker count, the first budget) on every report task x `seeds`; the other worker
    counts at the first budget on every other report task (`tasks_small` of them), the other budgets at the first
    worker count on every fourth (`tasks_budget`), x `seeds_small`; `full`: every (workers, budget) on all 26 tasks
    x 50 seeds. Every other and every fourth: spread over the list, chosen before any result."""
    every = tuple(str(t) for t in R.task_list("lcbench", "report"))
    out = []
    for b in budgets:
        for n in workers:
            first = (n, b) == (workers[0], budgets[0])
            if full or first:
                tasks = every
            elif b == budgets[0]:
                tasks = every[::2][:tasks_small]
            elif n == workers[0]:
                tasks = every[::4][:tasks_budget]
            else:
                continue  # several workers at a larger budget: only in the full report
            k = 50 if full else (seeds if first else seeds_small)
            out.append(Block(n, b, tasks, tuple(range(R.REPORT_SEED, R.REPORT_SEED + k))))
    return out


def fingerprint() -> str:
    """A hash of what every arm runs: a change to any of it is a new cache folder."""
    h = hashlib.sha256()
    files = sorted((R.ROOT / "autotune").rglob("*.py")) + sorted((R.ROOT / "bench").glob("replay*.py"))
    files += [R.ROOT / "bench" / "yahpo_lcbench" / f for f in ("lcbench.yaml", "fronts.json", "encoding.json")]
    for f in files:
        h.update(str(f.relative_to(R.ROOT)).encode())
        h.update(f.read_bytes())
    for dist in ("optuna", "syne-tune", "onnxruntime", "numpy"):
        h.update(f"{dist}={metadata.version(dist)}".encode())
    return h.hexdigest()[:12]


def cell_file(folder: Path, block: Block, task: str, seed: int, arm: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", arm.lower()).strip("-")
    return folder / f"w{block.workers}_b{block.budget_trials:g}" / f"{task}_s{seed}_{slug}.json"


Cell = tuple[str, str, int, int, float, str]  # task, arm, seed, workers, budget_trials, file


def run_cell(cell: Cell) -> tuple[Cell, float]:
    """A pool's task: one cell run and written; its process CPU seconds (every thread of this process)."""
    task, arm, seed, workers, trials, path = cell
    c0 = time.process_time()
    _, ev, real = R.one_run(("lcbench", task, arm, seed, workers, R.budget_of("lcbench", task, workers, trials),
                             True))
    cpu = time.process_time() - c0
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps({"events": ev, "cpu_s": round(cpu, 3), "real_s": round(real, 3)}))
    tmp.replace(path)
    return cell, cpu


def run_missing(folder: Path, blocks: list[Block], arms: list[str], jobs: int, t0: float) -> dict[str, float]:
    """Every cell without a file, longest first (autotune's, 8 workers, the larger budget); CPU seconds per arm."""
    todo: list[Cell] = []
    for b in blocks:
        for t in b.tasks:
            for s in b.seeds:
                for a in arms:
                    f = cell_file(folder, b, t, s, a)
                    if not f.exists():
                        f.parent.mkdir(parents=True, exist_ok=True)
                        todo.append((t, a, s, b.workers, b.budget_trials, str(f)))
    todo.sort(key=lambda c: -(c[4] * (2 if c[3] > 1 else 1) * (3 if c[1] == "autotune" else 1)))
    total = sum(len(b.tasks) * len(b.seeds) * len(arms) for b in blocks)
    print(f"cells: {total}, finished before {total - len(todo)}, to run {len(todo)} ({jobs} processes)", flush=True)
    cpu = {a: 0.0 for a in arms}
    if not todo:
        return cpu
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        for i, done in enumerate(as_completed([pool.submit(run_cell, c) for c in todo]), 1):
            cell, c = done.result()
            cpu[cell[1]] += c
            if i % max(1, len(todo) // 20) == 0 or i == len(todo):
                print(f"  {i}/{len(todo)} cells, {time.perf_counter() - t0:.0f}s (load {os.getloadavg()[0]:.1f})",
                      flush=True)
    return cpu


def read_block(folder: Path, block: Block, arms: list[str]) -> tuple[R.Runs, dict[str, float]]:
    runs: R.Runs = {}
    cpu = {a: 0.0 for a in arms}
    for t in block.tasks:
        for a in arms:
            cells = [json.loads(cell_file(folder, block, t, s, a).read_text()) for s in block.seeds]
            runs[(t, block.workers, a)] = [[tuple(e) for e in c["events"]] for c in cells]  # type: ignore[misc]
            cpu[a] += sum(c["cpu_s"] for c in cells)
    return runs, cpu


def print_block(block: Block, arms: list[str], ms: Any, budgets: dict[tuple[Any, int], float],
                figures: dict[str, Any]) -> list[str]:
    n, tasks = block.workers, list(block.tasks)
    bases = [b for b in R.BASELINES if b in arms]
    print(f"\n### LCBench, {block.tag} median full trainings{' / 8 workers x 2' if n > 1 else ''}: "
          f"{len(tasks)} report tasks x seeds {block.seeds[0]}-{block.seeds[-1]} ({len(block.seeds)}); "
          "epoch 1 (untrained) dropped for every arm\n")
    print("```")
    R.summary(n, tasks, arms, ms, budgets)
    print("```")
    rm.tables(ms, tasks, n, arms, bases, budgets, R.SHORT, figures, block.tag)
    for q in R.TARGETS:
        print(f"\nspeed-up to {int(100 * q)} % of the fixed reference (linear time): RMST(baseline) / RMST(arm), "
              "median over tasks [95 % interval] (tasks with interval > 1)\n")
        print("| arm | " + " | ".join(f"vs {R.SHORT.get(b, b)}" for b in bases) + " |\n|---|" + "---|" * len(bases))
        for arm in arms:
            cells = [R.speedup(n, tasks, ms, budgets, "lin", q, arm, b, figures) if b != arm else "-" for b in bases]
            print(f"| {arm} | " + " | ".join(cells) + " |")
    print("\nbest accuracy at the end: mean paired difference (arm - baseline), median over tasks (tasks whose "
          "interval is above 0 / below 0)\n")
    print("| arm | " + " | ".join(f"vs {R.SHORT.get(b, b)}" for b in bases) + " |\n|---|" + "---|" * len(bases))
    for arm in arms:
        cells = [R.difference(n, tasks, ms, lambda s: s.best_acc, arm, b, f"best|{block.tag}|{arm}|{b}", figures)
                 if b != arm else "-" for b in bases]
        print(f"| {arm} | " + " | ".join(cells) + " |")
    return rm.goals(ms, tasks, n, "autotune", budgets, block.tag) if "autotune" in arms else []


def parse(argv: list[str]) -> argparse.Namespace:
    """The command's arguments; the budgets default to 20 (the report), 20 and 60 with --full."""
    ap = argparse.ArgumentParser(prog="replay.py --workload lcbench --report", description=__doc__.splitlines()[0])
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--workload", default="lcbench", choices=["lcbench"])
    ap.add_argument("--full", action="store_true", help="every block on all 26 report tasks x 50 seeds")
    ap.add_argument("--seeds", type=int, default=3, help="seeds of the first block (1 worker, budget 20)")
    ap.add_argument("--seeds-small", type=int, default=1, help="seeds of the other blocks")
    ap.add_argument("--tasks-small", type=int, default=13, help="report tasks at the other worker counts (every "
                                                                "other one)")
    ap.add_argument("--tasks-budget", type=int, default=7, help="report tasks at the other budgets (every fourth)")
    ap.add_argument("--budgets", type=float, nargs="+", default=None,
                    help="1-worker budgets in median full-training times of the task (20 60: the larger one's block "
                         "too; --full: both by default)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--only", default=None, help="comma-separated task ids: a subset of the blocks' tasks (a trial)")
    ap.add_argument("--arms", default=None, help=f"comma-separated (default: {', '.join(REPORT_ARMS)})")
    ap.add_argument("--cache", type=Path, default=None, help="the cells' folder (default: studies/replay-report/"
                                                             "<fingerprint of the code>)")
    ap.add_argument("--json", type=Path, default=None, help="write the tables' figures here (JSON)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    if args.budgets is None:
        args.budgets = [20.0, 60.0] if args.full else [20.0]
    return args


def main(argv: list[str]) -> None:
    args = parse(argv)
    t0, load0 = time.perf_counter(), os.getloadavg()
    arms = [a for a in args.arms.split(",") if a] if args.arms else list(REPORT_ARMS)
    unknown = [a for a in arms if a not in R.ARMS]
    if unknown:
        print(f"replay.py: --arms: unknown {', '.join(unknown)}; known: {', '.join(R.ARMS)}", file=sys.stderr)
        raise SystemExit(2)  # a user's mistake: one line, exit 2
    blocks = plan(args.full, args.seeds, args.seeds_small, args.tasks_small, args.tasks_budget, args.budgets,
                  args.workers)
    if args.only:
        keep = set(args.only.split(","))
        blocks = [Block(b.workers, b.budget_trials, tuple(t for t in b.tasks if t in keep), b.seeds) for b in blocks]
        blocks = [b for b in blocks if b.tasks]
    folder = args.cache or R.ROOT / "studies" / "replay-report" / fingerprint()
    print(f"replay report: LCBench, {len(arms)} arms, blocks: "
          + "; ".join(f"{b.tag}: {len(b.tasks)} tasks x {len(b.seeds)} seeds" for b in blocks)
          + f"; cells in {folder}", flush=True)
    cpu_run = run_missing(folder, blocks, arms, args.jobs, t0)
    figures: dict[str, Any] = {}
    goal_lines: list[str] = []
    cpu_all = {a: 0.0 for a in arms}
    for b in blocks:
        runs, cpu = read_block(folder, b, arms)
        for a, c in cpu.items():
            cpu_all[a] += c
        budgets = {(t, b.workers): R.budget_of("lcbench", t, b.workers, b.budget_trials) for t in b.tasks}
        goal_lines += print_block(b, arms, R.all_measures("lcbench", runs, budgets), budgets, figures)
    if goal_lines:
        print("\n### Goals (autotune; met only where the 95 % interval's lower end clears it)\n")
        print("| block | goal | autotune [95 % interval] | |\n|---|---|---|---|")
        print("\n".join(goal_lines))
    if args.json:
        args.json.write_text(json.dumps(figures))
    n_cells = sum(len(b.tasks) * len(b.seeds) for b in blocks)
    print(f"\nprocess CPU seconds per arm, all {n_cells} cells each (cached ones as they were measured): "
          + ", ".join(f"{a} {c:.0f}" for a, c in cpu_all.items())
          + f"; run now: {sum(cpu_run.values()):.0f}")
    print(f"elapsed {time.perf_counter() - t0:.0f}s with {args.jobs} processes; load average at start "
          f"{load0[0]:.1f}, at end " + " ".join(f"{x:.1f}" for x in os.getloadavg()))


__all__ = ["Block", "REPORT_ARMS", "fingerprint", "main", "parse", "plan", "run_cell"]
