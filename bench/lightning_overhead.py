"""What does autotune's Lightning integration cost a trial, and does its clock agree with Lightning's own?

Both arms train the digits example's LightningModule (examples/digits_lightning.py) with the same Trainer
flags, the module's own Adam at the same lr (`own_optimizer=True`: autotune's fused Adam would make (b) faster for
a reason that is not the integration), the same batch size, on the CPU: (a) plain `Trainer.fit`, (b) the same
module through `autotune.integrations.lightning.fit` on a trial context (its callback, clocks, stop rules, rebuilt
loaders). Each arm's training seconds are timed by one small Callback, the same in both (each epoch from
on_train_epoch_start to its last on_train_batch_end: validation excluded); arms run in interleaved rounds (a slow
spell of a shared machine hits both alike; which goes first alternates). Printed: median training seconds per arm
and their ratio (b)/(a) (goal: at most 1.03), and (b)'s recorded train_time_s against the callback's seconds.

    python bench/lightning_overhead.py [--rounds 5] [--epochs 4] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

import lightning as L  # noqa: E402
from digits_lightning import Digits, DigitsNet  # noqa: E402

from autotune.integrations import lightning as tune_lightning  # noqa: E402
from autotune.spec.settings import DEFAULTS  # noqa: E402
from autotune.training import TrainingPlan, TrialContext, run_fit, trial_session  # noqa: E402

BATCH, LR = 64, 1e-3
FLAGS = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


class TrainClock(L.Callback):
    """Training seconds per epoch: from the epoch's start to its last training batch's end."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.t0 = self.t1 = time.perf_counter()

    def on_train_batch_end(self, *args: Any) -> None:
        self.t1 = time.perf_counter()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.seconds.append(self.t1 - self.t0)


def plain(epochs: int, seed: int) -> float:
    torch.manual_seed(seed)
    clock = TrainClock()
    module = DigitsNet(width=16, lr=LR)
    L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, callbacks=[clock], **FLAGS).fit(module,
                                                                                               Digits(BATCH))
    return sum(clock.seconds)


def through_autotune(epochs: int, seed: int) -> tuple[float, float]:
    torch.manual_seed(seed)
    clock = TrainClock()
    values = {**DEFAULTS, "device": "cpu", "epochs": epochs, "batch_size": BATCH, "eval_batch_size": 256}
    # (fixed as a study's train: would: the trial's epochs and batch sizes; the module's own Adam)
    ctx = TrialContext(TrainingPlan.bare(values, seed=seed, fixed=("epochs", "batch_size", "eval_batch_size")))

    def fit(c: TrialContext) -> None:
        tune_lightning.fit(c, DigitsNet(width=16, lr=LR), Digits(), own_optimizer=True, callbacks=[clock])

    with trial_session(values):
        r = run_fit(fit, ctx)
    return sum(clock.seconds), r.train_time_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    plain(1, 0)
    through_autotune(1, 0)  # warm-up: imports, first-call costs
    pa, pb, rec = [], [], []
    for r in range(a.rounds):  # (which arm goes first alternates)
        if r % 2:
            pa.append(plain(a.epochs, r))
        b, recorded = through_autotune(a.epochs, r)
        pb.append(b)
        rec.append(recorded / b)
        if not r % 2:
            pa.append(plain(a.epochs, r))
    ma, mb = statistics.median(pa), statistics.median(pb)
    print(f"load average {os.getloadavg()[0]:.2f}; {a.rounds} rounds x {a.epochs} epochs, batch {BATCH}, "
          f"{a.threads} thread(s)")
    print(f"(a) plain Trainer.fit       training s (median): {ma:.3f}")
    print(f"(b) through the integration training s (median): {mb:.3f}   (b)/(a) = {mb / ma:.3f}")
    print(f"(b)'s recorded train_time_s / its callback's training s: median {statistics.median(rec):.4f}, "
          f"range {min(rec):.4f}..{max(rec):.4f}")


if __name__ == "__main__":
    main()
