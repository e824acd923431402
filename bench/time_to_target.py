"""Who reaches a good speed-accuracy front first? Search arms under equal wall budgets, several seeds, two tasks.

Every arm searches the same joint space (hyper-parameters and acceleration settings) for the same two
objectives, validation accuracy up and training time down, through the same trainer:
- random search: Optuna's RandomSampler, an objective written by hand around `autotune.train`;
- plain Optuna: what a user writes without autotune: `optuna.create_study(directions=[...])` (the default
  sampler), the same hand-written objective, no pruning (Optuna cannot prune with several objectives);
- autotune joint / autotune probe_then_tune: `autotune.run` with that `study.strategy`, Pareto pruning,
  the slow rule `vs_front: 3` and the speed probe.

The measure: the hypervolume of each study's front of (training time, error) as the wall clock runs,
against a reference: the hypervolume of the union of every arm's and seed's front (reference point: error 1,
1.1 x the slowest training time on that union front). Per arm, the wall time until its front reaches 98%
(and 95%, 90%) of the reference (median over seeds; "-" where fewer than half the seeds reach it), the
hypervolume at the end of the budget, the best accuracy, trials finished and pruned. A trial that ends after
the budget does not count. Arms run in turn, in a rotated order per seed, so a shared machine's load falls
on all of them alike; torch uses one thread.

    python bench/time_to_target.py [--budget 60] [--seeds 3] [--tasks digits,image]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import autotune  # noqa: E402
from autotune import config  # noqa: E402
from autotune.search import space  # noqa: E402
from autotune.spec import TrialRecord  # noqa: E402

SPACE: dict[str, Any] = {
    "lr": {"type": "float", "low": 1e-4, "high": 3e-1, "log": True},
    "optimizer": {"type": "categorical", "choices": ["sgd", "adam", "adamw", "rmsprop"]},
    "momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}},
    "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-2, "log": True},
    "batch_size": {"type": "categorical", "choices": [16, 32, 64, 128, 256]},
    "epochs": {"type": "int", "low": 2, "high": 12},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    "lr_schedule": {"type": "categorical", "choices": ["constant", "cosine", "onecycle"]},
    "precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
    "channels_last": {"type": "bool"},
    "data_on_device": {"type": "bool"},
    "init": {"type": "categorical", "choices": ["default", "xavier_uniform", "kaiming_normal", "orthogonal"]},
}
TASKS: dict[str, dict[str, Any]] = {
    "digits": {"data": {"name": "digits"}, "model": {"name": "cnn", "channels": [16, 32], "hidden": 64}},
    # images where the acceleration settings matter more: 3x32x32, a ResNet-8
    "image": {"data": {"name": "synthetic", "shape": [3, 32, 32], "n_samples": 2000, "n_classes": 10,
                       "label_noise": 0.05}, "model": {"name": "resnet", "depth": 8, "width": 8}},
    # many classes, label noise, few samples per class (the earlier bench's harder task)
    "hard": {"data": {"name": "synthetic", "shape": [3, 8, 8], "n_samples": 3000, "n_classes": 20,
                      "label_noise": 0.15}, "model": {"name": "cnn", "channels": [16, 32], "hidden": 64}},
}
AUTOTUNE_PRUNING = {"pruner": "pareto", "slow": {"vs_front": 3.0}}
ARMS: dict[str, dict[str, Any]] = {
    "random search": {"kind": "plain", "sampler": "random"},
    "plain Optuna": {"kind": "plain", "sampler": "default"},
    "autotune joint": {"kind": "autotune", "strategy": "joint"},
    "autotune probe_then_tune": {"kind": "autotune", "strategy": "probe_then_tune"},
}
TARGETS = (0.98, 0.95, 0.90)


def make_cfg(task: str, name: str, storage: str, seed: int, budget: float, strategy: str = "joint",
             pruning: dict[str, Any] | None = None, sections: dict[str, Any] | None = None,
             study: dict[str, Any] | None = None) -> Any:
    """The bench's study on `task` (or on `sections`: its data and model), with `pruning` (default: this bench's)
    and `study` over its study section."""
    return config.from_dict({
        "study": {"name": name, "storage": storage, "n_trials": 100_000, "timeout": budget, "seed": seed,
                  "strategy": strategy, **(study or {})},
        **{k: v for k, v in (sections if sections is not None else TASKS[task]).items() if k != "space"},
        "train": {"device": "cpu"}, "space": (sections or {}).get("space", SPACE),  # a task's own space, if it has one
        "pruning": AUTOTUNE_PRUNING if pruning is None else pruning,
    }, source=str(ROOT / "bench" / "time_to_target.yaml"))


def run_plain(cfg: Any, sampler: str, seed: int, budget: float) -> tuple[float, list[tuple]]:
    """A user's own study: Optuna's default (or random) sampler, `autotune.train` in a hand-written objective."""
    t0 = time.time()
    return t0, events(plain_study(cfg, sampler, seed, budget), t0, budget)


def plain_study(cfg: Any, sampler: str, seed: int, budget: float) -> optuna.Study:
    """`run_plain`'s study, run for `budget` seconds (each trial's train_time_s a user attr)."""
    def objective(trial: optuna.Trial) -> tuple[float, float]:
        params = space.sample(trial, cfg)  # the same suggest calls a hand-written objective makes
        r = autotune.train(cfg, params={k: v for k, v in params.items() if k in cfg.space}, seed=trial.number)
        trial.set_user_attr("val_accuracy", r.val_accuracy)
        trial.set_user_attr("train_time_s", r.train_time_s)
        return r.val_accuracy, r.train_time_s

    # Optuna's default sampler for several objectives is TPESampler() (its defaults), seeded here like the rest
    smp = optuna.samplers.RandomSampler(seed=seed) if sampler == "random" else optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=smp)
    study.optimize(objective, timeout=budget)
    return study


def run_autotune(cfg: Any) -> tuple[float, list[tuple]]:
    t0 = time.time()
    res = autotune.run(cfg)
    return t0, events(res.study, t0, cfg.study.timeout)


def events(study: optuna.Study, t0: float, budget: float) -> list[tuple]:
    """(seconds since start, accuracy or None, training time or None, state) of every trial done in budget."""
    out = []
    for t in study.get_trials(deepcopy=False):
        if t.datetime_complete is None:
            continue
        at = t.datetime_complete.timestamp() - t0
        ok = t.state == TrialState.COMPLETE
        if at <= budget:
            metrics = TrialRecord.of(t).metrics if ok else {}
            out.append((at, metrics.get("val_accuracy"), metrics.get("train_time_s"), t.state.name))
    return sorted(out, key=lambda e: e[0])


def front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Non-dominated (time down, accuracy up) points, by time."""
    out: list[tuple[float, float]] = []
    for t, a in sorted(points, key=lambda p: (p[0], -p[1])):
        if not out or a > out[-1][1]:
            out.append((t, a))
    return out


def hypervolume(points: list[tuple[float, float]], t_ref: float) -> float:
    """Area dominated by (time, accuracy) points against (t_ref, accuracy 0): time down, accuracy up."""
    f = [p for p in front(points) if p[0] < t_ref]
    area = 0.0
    for i, (t, a) in enumerate(f):
        area += a * ((f[i + 1][0] if i + 1 < len(f) else t_ref) - t)
    return area


def curve(ev: list[tuple], t_ref: float) -> list[tuple[float, float]]:
    """(wall seconds, hypervolume of the front so far) after each completed trial."""
    pts: list[tuple[float, float]] = []
    out = []
    for at, acc, tt, _ in ev:
        if acc is not None and tt is not None:
            pts.append((tt, acc))
            out.append((at, hypervolume(pts, t_ref)))
    return out


def time_to(c: list[tuple[float, float]], target: float) -> float:
    return next((at for at, hv in c if hv >= target), math.inf)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def fmt_s(x: float, budget: float) -> str:
    return f"{x:.1f}s" if math.isfinite(x) else f"> {budget:g}s"


def ratio(base: float, x: float) -> str:
    if math.isfinite(base) and math.isfinite(x):
        return f"{base / x:.2f}x"
    if math.isfinite(x):
        return "> " + "budget"  # the baseline never got there
    return "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=60.0, help="wall seconds per arm and seed")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tasks", default="digits,image")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated arm names (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    arms = [a for a in args.arms.split(",") if a]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    print(f"time to target: budget {args.budget:g}s x {args.seeds} seeds per arm, torch 1 thread, "
          f"load average {load:.1f} at start", flush=True)
    for task in args.tasks.split(","):
        runs: dict[str, list[list[tuple]]] = {a: [] for a in arms}
        with tempfile.TemporaryDirectory() as tmp:
            autotune.train(make_cfg(task, "warm", f"sqlite:///{tmp}/w.db", 0, 1.0),
                           params={"epochs": 1})  # data loaded and kernels warm before any clock
            for seed in range(args.seeds):
                order = arms[seed % len(arms):] + arms[:seed % len(arms)]
                for arm in order:
                    spec = ARMS[arm]
                    cfg = make_cfg(task, f"{task}-{seed}", f"sqlite:///{tmp}/{abs(hash(arm))}-{seed}.db", seed,
                                   args.budget, spec.get("strategy", "joint"))
                    if spec["kind"] == "plain":
                        _, ev = run_plain(cfg, spec["sampler"], seed, args.budget)
                    else:
                        _, ev = run_autotune(cfg)
                    runs[arm].append(ev)
                    done = [e for e in ev if e[3] == "COMPLETE"]
                    print(f"  {task} seed {seed} {arm}: {len(ev)} trials ({len(done)} complete), best accuracy "
                          f"{max((e[1] for e in done), default=float('nan')):.4f}", flush=True)
        report(task, runs, args.budget)


def report(task: str, runs: dict[str, list[list[tuple]]], budget: float) -> None:
    union = [(e[2], e[1]) for rs in runs.values() for ev in rs for e in ev if e[1] is not None]
    t_ref = 1.1 * max(t for t, _ in front(union))
    ref = hypervolume(union, t_ref)
    print(f"\ntask {task}: budget {budget:g}s; reference: union of every front, hypervolume {ref:.4f} "
          f"(time reference {t_ref:.2f}s, error reference 1)")
    head = f"{'arm':<26}" + "".join(f"{'to ' + str(int(100 * q)) + '%':>12}" for q in TARGETS) + \
        f"{'vs plain':>10}{'vs random':>11}{'HV end':>8}{'best acc':>10}{'trials':>8}{'pruned':>8}"
    print(head)
    med: dict[str, float] = {}
    rows = []
    for arm, rs in runs.items():
        curves = [curve(ev, t_ref) for ev in rs]
        cells = []
        for q in TARGETS:
            ts = sorted(time_to(c, q * ref) for c in curves)
            m = ts[len(ts) // 2] if len(ts) % 2 else (ts[len(ts) // 2 - 1] + ts[len(ts) // 2]) / 2
            if q == TARGETS[0]:
                med[arm] = m
            hit = sum(1 for x in ts if math.isfinite(x))
            cells.append(f"{fmt_s(m, budget)} {hit}/{len(ts)}")
        end = median([c[-1][1] / ref if c else 0.0 for c in curves])
        best = median([max((e[1] for e in ev if e[1] is not None), default=0.0) for ev in rs])
        n = median([len(ev) for ev in rs])
        pruned = median([sum(1 for e in ev if e[3] == "PRUNED") for ev in rs])
        rows.append((arm, cells, end, best, n, pruned))
    for arm, cells, end, best, n, pruned in rows:
        print(f"{arm:<26}" + "".join(f"{c:>12}" for c in cells)
              + f"{ratio(med.get('plain Optuna', math.nan), med[arm]):>10}"
              + f"{ratio(med.get('random search', math.nan), med[arm]):>11}"
              + f"{end:>8.3f}{best:>10.4f}{n:>8.0f}{pruned:>8.0f}")
    print("to q%: median over seeds of the wall time until the front's hypervolume reached q x the reference "
          "(and in how many seeds); vs plain / vs random: that arm's median time to 98% / this arm's (higher is "
          "faster); HV end: median hypervolume at the budget / reference; best acc, trials, pruned: medians")


if __name__ == "__main__":
    main()
