"""The epoch clock of a loop that leaves `ctx.loader` early and then evaluates: what autotune bills as training
against the steps' own time, on the device asked for (on CUDA the clock is an event per step, read once).

    python bench/step_clock.py [--device cuda] [--steps 20] [--eval-s 0.5]

Prints, per epoch, autotune's epoch_time_s, the wall time of the training steps measured around them with a
synchronize (the baseline, same run), their ratio (1.00x: evaluation is not billed) and the evaluation's length.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

from autotune.spec.settings import DEFAULTS
from autotune.training.context.trial import TrialContext


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--eval-s", type=float, default=0.5)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    x, y = torch.randn(4096, 256), torch.randint(0, 10, (4096,))
    ctx = TrialContext({**DEFAULTS, "device": args.device, "epochs": args.epochs, "batch_size": 128})
    model, _ = ctx.prepare(nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10)))
    train = ctx.loader((x, y))
    sync = torch.cuda.synchronize if ctx.device.type == "cuda" else (lambda: None)
    steps_s = []
    for _ in ctx.epochs():
        for i, (xb, yb) in enumerate(train):
            if i == args.steps:
                break  # airbench's step budget: the batch taken last is not trained on
            if i == 0:
                sync()
                t0 = time.perf_counter()
            with ctx.autocast():
                loss = F.cross_entropy(model(xb).float(), yb)
            ctx.backward(loss)
        sync()
        steps_s.append(time.perf_counter() - t0)
        time.sleep(args.eval_s)  # the evaluation that follows
        ctx.report(val_loss=float(loss))
    print(f"step clock on {ctx.device}: {args.steps} steps then {args.eval_s:g}s of evaluation per epoch")
    for h, s in zip(ctx._state.history, steps_s):
        print(f"  epoch {h.epoch}: epoch_time_s {h.epoch_time_s:.4f}  steps' own {s:.4f}  ratio "
              f"{h.epoch_time_s / s:.2f}x")


if __name__ == "__main__":
    main()
