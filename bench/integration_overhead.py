"""The Hugging Face integration's cost and clocks: the same Trainer run plain and through autotune.

(a) plain: the example's Trainer (examples/hf_text.py's model and data, larger) built from the same
TrainingArguments and the same optimizer autotune builds, `trainer.train()`; (b) the same through
`autotune.integrations.hf.trainer_fit` on a trial context (its callback, clocks and records). Interleaved,
--repeats of each; medians. Printed, each a ratio measured in this run:

- overhead: (b)'s `train_runtime` (the Trainer's own clock) over (a)'s, and (b)'s whole trial (build + train +
  records) over (a)'s build + train, in wall and in CPU seconds (the CPU time is what a shared machine's other
  jobs sway least);
- clock agreement: (b)'s recorded training time over the Trainer's `train_runtime` less its evaluations'
  `eval_runtime` (the rest is the Trainer's start-up and per-epoch logging, outside autotune's clock).

    python bench/integration_overhead.py [--repeats 5] [--epochs 3] [--n-train 3072] [--hidden 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from transformers import Trainer, TrainingArguments  # noqa: E402

from autotune.integrations import hf  # noqa: E402
from autotune.spec.settings import DEFAULTS  # noqa: E402
from autotune.training import TrainingPlan, TrialContext, TrialPort, run_fit, trial_session  # noqa: E402
from examples import hf_text  # noqa: E402

CHOSEN = ("epochs", "optimizer", "lr", "batch_size")  # fixed, as a study's train: would (the rest: the Trainer's)


def settings(epochs: int) -> dict[str, Any]:
    return {**DEFAULTS, "device": "cpu", "epochs": epochs, "optimizer": "adamw", "lr": 3e-3, "batch_size": 32}


def context(opts: argparse.Namespace) -> TrialContext:
    return TrialContext(TrainingPlan.bare(settings(opts.epochs), user={"hidden": opts.hidden}, seed=0,
                                          metrics=["val_accuracy", "val_loss"], fixed=CHOSEN))


def plain(opts: argparse.Namespace, out: str) -> tuple[float, float, float, float]:
    """(train_runtime, the evaluations' eval_runtime, seconds to build and train, CPU seconds of that)."""
    t0, c0 = time.perf_counter(), time.process_time()
    ctx = context(opts)
    port = TrialPort(ctx)
    args, _ = hf.trial_arguments(port, TrainingArguments(output_dir=out), given={"output_dir"})
    trainer = hf_text.make_trainer(args, ctx)
    trainer.optimizer_cls_and_kwargs = (hf._optimizer_factory(port, trainer), {})  # the same optimizer
    with trial_session(ctx.settings):
        metrics = trainer.train().metrics
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    evals = sum(h["eval_runtime"] for h in trainer.state.log_history if "eval_runtime" in h)
    return metrics["train_runtime"], evals, wall, cpu


def integrated(opts: argparse.Namespace, out: str) -> tuple[float, float, float, float, float]:
    """(train_runtime, eval_runtime, seconds for the whole trial, CPU seconds of it, the recorded training
    seconds)."""
    seen: list[Trainer] = []

    def make(args: Any, ctx: TrialContext) -> Trainer:
        seen.append(hf_text.make_trainer(args, ctx))
        return seen[-1]

    t0, c0 = time.perf_counter(), time.process_time()
    ctx = context(opts)
    with trial_session(ctx.settings):
        res = run_fit(hf.trainer_fit(make, output_dir=out), ctx)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    log = seen[0].state.log_history
    runtime = next(h["train_runtime"] for h in log if "train_runtime" in h)
    evals = sum(h["eval_runtime"] for h in log if "eval_runtime" in h)
    return runtime, evals, wall, cpu, res.train_time_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--n-train", type=int, default=3072)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: no spinning threads in the CPU time)")
    opts = p.parse_args()
    torch.set_num_threads(opts.threads)
    hf_text.TRAIN = hf_text.Reviews(opts.n_train, seed=0)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {opts.repeats} x (plain, integrated), {opts.epochs} "
          f"epochs of {opts.n_train} samples, hidden {opts.hidden}")
    a: list[tuple[float, ...]] = []
    b: list[tuple[float, ...]] = []
    with tempfile.TemporaryDirectory() as out:
        integrated(opts, out)  # warm-up (imports, first allocations), not counted
        for _ in range(opts.repeats):
            a.append(plain(opts, out))
            b.append(integrated(opts, out))
            print(f"  plain train_runtime {a[-1][0]:.3f} s, integrated {b[-1][0]:.3f} s", flush=True)
    med = [statistics.median(x) for x in zip(*a)]
    mbd = [statistics.median(x) for x in zip(*b)]
    agree = [rec / (run - ev) for run, ev, _, _, rec in b]
    print(f"train_runtime        plain {med[0]:.3f} s   integrated {mbd[0]:.3f} s   ratio {mbd[0] / med[0]:.3f}x")
    print(f"whole trial          plain {med[2]:.3f} s   integrated {mbd[2]:.3f} s   ratio {mbd[2] / med[2]:.3f}x")
    print(f"CPU time, whole trial plain {med[3]:.3f} s   integrated {mbd[3]:.3f} s   ratio {mbd[3] / med[3]:.3f}x "
          "(the process's CPU seconds: less swayed by other jobs than the wall clock)")
    print(f"recorded / (train_runtime - eval_runtime): median {statistics.median(agree):.3f}, "
          f"range {min(agree):.3f}..{max(agree):.3f}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
