"""Does pruning buy wall time? Search arms under equal wall budgets, several seeds, two tasks.

Arms: (a) random search, no pruning; (b) TPE, no pruning; (c) TPE + Optuna's Hyperband pruner
(single objective); (d1) autotune's default for one objective (TPE + median pruner + divergence
and slow rules); (d2) autotune's default for two objectives (val_accuracy, train_time_s: TPE +
the Pareto pruner), which Optuna alone cannot prune.

Per arm: wall time until a trial reached within 0.3 points of the best accuracy any arm reached
in any seed (the near-best target), area under the best-so-far accuracy curve (mean best-so-far
over the budget), trials finished / pruned, and for every arm the hypervolume of (accuracy,
train time) over its trials against wall time (reference: accuracy 0, the slowest train time seen).

    python bench/time_to_target.py [--budget 40] [--seeds 3] [--tasks digits,hard]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from typing import Any

import optuna
from optuna.trial import TrialState

import autotune
from autotune import config

SPACE: dict[str, Any] = {
    "lr": {"type": "float", "low": 1e-4, "high": 3e-1, "log": True},
    "optimizer": {"type": "categorical", "choices": ["sgd", "adam", "adamw", "rmsprop"]},
    "momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}},
    "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-2, "log": True},
    "batch_size": {"type": "categorical", "choices": [16, 32, 64, 128, 256]},
    "epochs": {"type": "int", "low": 2, "high": 16},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    "lr_schedule": {"type": "categorical", "choices": ["constant", "cosine", "onecycle"]},
    "precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
    "init": {"type": "categorical", "choices": ["default", "xavier_uniform", "kaiming_normal", "orthogonal"]},
}
TASKS: dict[str, dict[str, Any]] = {
    "digits": {"name": "digits"},
    # many classes, label noise, few samples per class: settings matter more, arms separate
    "hard": {"name": "synthetic", "shape": [3, 8, 8], "n_samples": 3000, "n_classes": 20, "label_noise": 0.15},
}
NO_PRUNING = {"pruner": "none", "divergence": None}
ARMS: dict[str, dict[str, Any]] = {
    "(a) random, no pruning": {"sampler": "random", "objectives": ["val_accuracy"], "pruning": NO_PRUNING},
    "(b) TPE, no pruning": {"sampler": "tpe", "objectives": ["val_accuracy"], "pruning": NO_PRUNING},
    "(c) TPE + Hyperband": {"sampler": "tpe", "objectives": ["val_accuracy"],
                            "pruning": {"pruner": "hyperband", "divergence": None}},
    "(d1) autotune, 1 objective": {"sampler": "tpe", "objectives": ["val_accuracy"],
                                   "pruning": {"pruner": "auto", "slow": {"vs_front": 3.0}}},
    "(d2) autotune, 2 objectives": {"sampler": "tpe", "objectives": ["val_accuracy", "train_time_s"],
                                    "pruning": {"pruner": "pareto", "slow": {"vs_front": 3.0}}},
}


def run_arm(task: str, arm: dict[str, Any], seed: int, budget: float, storage: str) -> tuple[float, list]:
    cfg = config.from_dict({
        "study": {"name": f"{task}-{seed}", "storage": storage, "sampler": arm["sampler"], "n_trials": 10_000,
                  "timeout": budget, "seed": seed},
        "objectives": arm["objectives"], "data": TASKS[task],
        "model": {"name": "cnn", "channels": [16, 32], "hidden": 64},
        "space": SPACE, "pruning": arm["pruning"],
    })
    t0 = time.time()
    res = autotune.run(cfg)
    events = []  # (seconds since start, accuracy or None if stopped, train_time_s, state)
    for t in res.study.get_trials(deepcopy=False):
        if t.datetime_complete is None:
            continue
        at = t.datetime_complete.timestamp() - t0
        acc = t.user_attrs.get("val_accuracy") if t.state == TrialState.COMPLETE else None
        if at <= budget:  # equal budgets: a trial that ends after the budget does not count
            events.append((at, acc, t.user_attrs.get("train_time_s"), t.state.name))
    return t0, sorted(events, key=lambda e: e[0])


def time_to(events: list, target: float) -> float:
    for at, acc, _, _ in events:
        if acc is not None and acc >= target:
            return at
    return math.inf


def auc(events: list, budget: float) -> float:
    """Mean over the budget of the best accuracy found so far (0 before the first result)."""
    area, best, last = 0.0, 0.0, 0.0
    for at, acc, _, _ in events:
        at = min(at, budget)
        area += best * (at - last)
        last = at
        if acc is not None:
            best = max(best, acc)
    area += best * (budget - last)
    return area / budget


def hypervolume(points: list[tuple[float, float]], t_ref: float) -> float:
    """Area dominated by (accuracy up, train time down) points, against (0, t_ref)."""
    pts = sorted((t, a) for a, t in points if t is not None and a is not None and t < t_ref)
    area, best_acc = 0.0, 0.0
    # sweep from fast to slow: each point adds the accuracy it gains over faster points
    for i, (t, a) in enumerate(pts):
        best_acc = max(best_acc, a)
        t_next = pts[i + 1][0] if i + 1 < len(pts) else t_ref
        area += best_acc * (t_next - t)
    return area


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=40.0, help="wall seconds per arm and seed")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tasks", default="digits,hard")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    autotune.train(config.from_dict({"train": {"epochs": 1}}))  # warm-up outside every clock
    for task in args.tasks.split(","):
        runs: dict[str, list[list]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for name, arm in ARMS.items():
                runs[name] = []
                for seed in range(args.seeds):
                    storage = f"sqlite:///{tmp}/{abs(hash(name))}-{seed}.db"
                    runs[name].append(run_arm(task, arm, seed, args.budget, storage)[1])
        best = max(acc for rs in runs.values() for ev in rs for _, acc, _, _ in ev if acc is not None)
        target = best - 0.003
        t_ref = max(tt for rs in runs.values() for ev in rs for _, _, tt, _ in ev if tt is not None) * 1.01
        print(f"\ntask {task}: budget {args.budget:g}s x {args.seeds} seeds per arm; best accuracy any arm "
              f"reached {best:.4f}; target {target:.4f}")
        print(f"{'arm':<30}{'time to target':>16}{'vs (a)':>8}{'AUC':>8}{'trials':>8}{'pruned':>8}{'HV':>8}")
        base = None
        for name, rs in runs.items():
            ttt = [time_to(ev, target) for ev in rs]
            med = statistics.median(ttt)
            base = med if base is None else base
            hit = sum(1 for x in ttt if math.isfinite(x))
            auc_m = statistics.mean(auc(ev, args.budget) for ev in rs)
            n = statistics.mean(len(ev) for ev in rs)
            pruned = statistics.mean(sum(1 for e in ev if e[3] == "PRUNED") for ev in rs)
            hv = statistics.mean(hypervolume([(e[1], e[2]) for e in ev], t_ref) for ev in rs) / t_ref
            ttt_s = f"{med:.1f}s ({hit}/{len(rs)})" if math.isfinite(med) else f"> budget ({hit}/{len(rs)})"
            ratio = f"{base / med:.2f}x" if math.isfinite(med) and math.isfinite(base) else "-"
            print(f"{name:<30}{ttt_s:>16}{ratio:>8}{auc_m:>8.4f}{n:>8.1f}{pruned:>8.1f}{hv:>8.4f}")
        print("time to target: median over seeds (seeds that reached it); vs (a): (a)'s median / this arm's "
              "(higher is better); HV: hypervolume / reference time, higher is better")


if __name__ == "__main__":
    main()
