"""Where a real run's wall clock goes: each trial's training against the rest, and the rest by stage.

    python bench/trial_overhead.py [--arm autotune] [--seed 0] [--budget 60] [--task mnist1d]

One run of bench/vs_optuna.py's arm (its config, torch on 1 thread, after the same warm-up), alone on the machine.
Per trial its wall time (start to end) against its history's `train_time_s` (the training, compile included):
the rest is the trial's start-up, evaluation, stop rules, proposal and records. For autotune's arm the stages
are timed too (the proposal, the trainer outside its training, the memory housekeeping, and outside the objective:
Optuna's ask and tell, the run's start), with the strategy's meter: how many trials each proposal mode made and its
measured price.

The replay (bench/replay_backend.py) charges a trial its recording's set-up and per-epoch evaluation and the arm's
own CPU seconds; this says what a real trial costs beyond that (bench/RESULTS.md, "Where a real run's clock goes").
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.spec import TrialRecord  # noqa: E402
from bench import time_to_target as ttt  # noqa: E402
from bench import vs_optuna as vo  # noqa: E402

STAGES: dict[str, float] = collections.Counter()


def timed(owner: Any, name: str, label: str) -> None:
    """Wrap `owner.name` to add its wall seconds to STAGES[label]."""
    f = getattr(owner, name)

    @functools.wraps(f)
    def wrapper(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            STAGES[label] += time.perf_counter() - t0
    setattr(owner, name, wrapper)


def time_stages() -> None:
    from autotune.speed import strategy
    from autotune.study import attempt, objective

    timed(objective.Objective, "__call__", "objective")
    timed(strategy.StrategyPoints, "sample", "proposal")
    timed(attempt.Attempts, "train", "trainer (with its training)")
    timed(objective.Objective, "_between_trials", "memory housekeeping")


def meter_of(study: optuna.Study) -> Any:
    smp: Any = study.sampler
    for _ in range(6):
        if smp is None or hasattr(smp, "meter"):
            break
        smp = getattr(smp, "inner", None)
    return getattr(smp, "meter", None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", default="autotune", choices=sorted(vo.ARMS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=60.0, help="wall seconds")
    ap.add_argument("--task", default="mnist1d")
    args = ap.parse_args()
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    sections = vo.task_sections(args.task)
    print(f"trial_overhead: {args.arm}, {args.task}, seed {args.seed}, {args.budget:g}s; load average at start "
          f"{vo.loadavg()}", flush=True)
    spec = vo.ARMS[args.arm]
    with tempfile.TemporaryDirectory() as tmp:
        warm: dict[str, Any] = {"epochs": 1}
        if "model.name" in sections.get("space", {}):
            warm["model.name"] = sections["space"]["model.name"]["choices"][0]
        ttt.autotune.train(ttt.make_cfg(args.task, "warm", f"sqlite:///{tmp}/w.db", 0, 1.0, sections=sections),
                           params=warm)
        cfg = ttt.make_cfg(args.task, f"o-{args.seed}", f"sqlite:///{tmp}/a.db", args.seed, args.budget,
                           spec.get("strategy", "joint"), pruning=spec.get("pruning"), sections=sections,
                           study=spec.get("study"))
        t0 = time.perf_counter()
        if spec["kind"] == "plain":
            study = ttt.plain_study(cfg, spec["sampler"], args.seed, args.budget)
        else:
            time_stages()
            study = ttt.autotune.run(cfg).study
        elapsed = time.perf_counter() - t0
    trials = sorted((t for t in study.get_trials(deepcopy=False) if t.datetime_complete is not None),
                    key=lambda t: t.number)
    wall = train = 0.0
    states: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0])
    for t in trials:
        assert t.datetime_start is not None and t.datetime_complete is not None
        w = (t.datetime_complete - t.datetime_start).total_seconds()
        record = TrialRecord.of(t)  # (plain Optuna's trials store train_time_s; autotune's stopped ones, a history)
        history = record.history or []
        tt = record.metric("train_time_s") or (float(history[-1]["train_time_s"]) if history else 0.0)
        wall, train = wall + w, train + tt
        s = states[t.state.name]
        s[0] += 1
        s[1] += tt
        s[2] += len(history)
    n = max(1, len(trials))
    print(f"elapsed {elapsed:.1f}s; {len(trials)} trials: "
          + ", ".join(f"{k.lower()} {int(v[0])} ({v[1]:.1f}s training"
                      + (f", {v[2] / max(v[0], 1):.1f} epochs each)" if v[2] else ")") for k, v in states.items()))
    print(f"in trials {wall:.1f}s: training {train:.1f}s, the rest {wall - train:.1f}s ({(wall - train) / n * 1e3:.0f} "
          f"ms a trial); outside any trial {elapsed - wall:.1f}s")
    if STAGES:
        inner = STAGES["trainer (with its training)"] - train
        rows = [("proposal", STAGES["proposal"]), ("trainer outside its training", inner),
                ("memory housekeeping", STAGES["memory housekeeping"]),
                ("outside the objective: ask, tell, the run's start", elapsed - STAGES["objective"])]
        for label, s in rows:
            print(f"  {label:<50} {s:6.2f}s  {s / n * 1e3:6.1f} ms a trial")
    meter = meter_of(study)
    if meter is not None:
        print(f"strategy's meter: modes {dict(meter.used)}, spent {meter.spent_s:.2f}s of the trials' "
              f"{meter.trial_s:.2f}s (cap {meter.cap:.0%}); last prices "
              + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in meter.price_s.items()))
    print(f"load average at end {vo.loadavg()} (pid {os.getpid()})")


if __name__ == "__main__":
    main()
