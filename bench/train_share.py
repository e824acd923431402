"""What share of a study's wall time is training? This tree against another checkout of autotune (not a test).

A short study of real trials (CNN on digits, few epochs, every trial the same shape so only the per-trial
costs differ) is run in a fresh process per tree, in turn, `--rounds` times. Per round: the study's wall time
(from `autotune.run`'s call to its return: opening the storage and one-off imports included), and in steady
state, from the first trial's end to the last one's: that time, the sum of those trials' `train_time_s` (the
epochs' clocks) and the training share; then the median over rounds per tree and the ratio of the two trees'
median non-training seconds per trial. The non-training part is what autotune adds around training:
sampling, building data and model, evaluation, bookkeeping, storage writes.

    python bench/train_share.py --other /path/to/an/older/checkout [--trials 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
sys.path.insert(0, sys.argv[1])
import optuna
optuna.logging.set_verbosity(optuna.logging.ERROR)
import autotune
from autotune import config
from autotune.spec import TrialRecord
raw = {"study": {"name": "share", "storage": f"sqlite:///{sys.argv[2]}/share.db", "n_trials": int(sys.argv[3]),
                 "seed": 0, "sampler": "random"},
       "data": {"name": "digits"}, "model": {"name": "cnn", "channels": [16, 32], "hidden": 64},
       "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
       "pruning": {"pruner": "none"},
       "train": {"device": "cpu", "epochs": 2, "batch_size": 128, "precision": "fp32"},
       "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}}}
cfg = config.from_dict(raw, source=sys.argv[2] + "/share.yaml")
autotune.train(cfg, params={"epochs": 1})  # data cached and kernels warm before the clock
t0 = time.perf_counter()
res = autotune.run(cfg)
wall = time.perf_counter() - t0
trials = sorted((t for t in res.study.trials if t.state.name == "COMPLETE"), key=lambda t: t.number)
# steady state: from the first trial's end to the last one's (the first trial pays one-off imports)
steady = (trials[-1].datetime_complete - trials[0].datetime_complete).total_seconds()
train = sum(float(TrialRecord.of(t).metrics["train_time_s"]) for t in trials[1:])
print(json.dumps({"wall": wall, "steady": steady, "train": train, "n": len(trials) - 1}))
"""


def one(root: Path, trials: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(root)}
        out = subprocess.run([sys.executable, "-c", CHILD, str(root), tmp, str(trials)], capture_output=True,
                             text=True, env=env, cwd=tmp, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", required=True, help="another checkout of autotune (its repository root)")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    trees = {"this tree": ROOT, "other": Path(args.other).resolve()}
    got: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
    for r in range(args.rounds):
        for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):  # alternate who goes first
            m = one(trees[name], args.trials)
            got[name].append(m)
            print(f"  round {r} {name}: run {m['wall']:.1f}s; steady {m['n']} trials in {m['steady']:.1f}s, "
                  f"training {m['train']:.1f}s ({m['train'] / m['steady']:.0%})", flush=True)
    print(f"{'tree':<10} {'run s':>7} {'steady s':>9} {'train s':>8} {'share':>7} {'other s/trial':>14}")
    extra = {}
    for name, ms in got.items():
        wall = statistics.median(m["wall"] for m in ms)
        steady = statistics.median(m["steady"] for m in ms)
        train = statistics.median(m["train"] for m in ms)
        extra[name] = statistics.median((m["steady"] - m["train"]) / m["n"] for m in ms)
        print(f"{name:<10} {wall:>7.1f} {steady:>9.1f} {train:>8.1f} {train / steady:>7.0%} {extra[name]:>14.3f}")
    print(f"non-training seconds per trial, this tree / other: {extra['this tree'] / extra['other']:.2f}x "
          f"({args.trials} trials, {args.rounds} rounds, medians; other = {trees['other']})")


if __name__ == "__main__":
    main()
