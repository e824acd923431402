"""What does the trial context cost? The same hand-written loop and model, bare and through the context.

Both arms: the same model, data on the device batched by a fresh permutation, Adam (fused) at the same lr,
fp32, the mean training loss summed on the device and read once per epoch, the epoch clocked the same way.
The context arm writes that loop with ctx.prepare / ctx.loader / ctx.autocast / ctx.backward / ctx.report,
so it pays for everything the context does per step (input-wait and sample counting, the hang check, the
accumulation counter, a finite check every 64 steps) and per epoch (its record, the stop rules). Arms run in
interleaved rounds (a slow spell of a shared machine hits both alike); each figure is the median samples/s
over rounds of the steady epochs (2..E). Goal: the context costs at most 3%.

    python bench/context_overhead.py [--rounds 7] [--epochs 6] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune import config
from autotune.spec.settings import DEFAULTS  # noqa: E402
from autotune.training import (
    accel,
    models,  # noqa: E402
)
from autotune.training.context.trial import TrialContext  # noqa: E402
from autotune.training.data import registry as data
from autotune.training.optimizers import fast_kwargs  # noqa: E402

BATCH, LR = 64, 1e-3


def workloads() -> dict[str, tuple[torch.Tensor, torch.Tensor, callable]]:
    """(x, y, model builder): the default digits CNN, and a tiny MLP where per-step overhead weighs most."""
    ds = data.load(config.DataConfig())
    cnn_cfg = config.ModelConfig(name="cnn", channels=(32, 64), hidden=128)
    mlp_cfg = config.ModelConfig(name="mlp", hidden=32, kwargs={"depth": 1})
    return {
        "digits cnn [32, 64]/128": (ds.x_train, ds.y_train,
                                    lambda: models.build(cnn_cfg, ds.input_shape, 10, 0.0, "default")),
        "digits mlp 32 (tiny steps)": (ds.x_train, ds.y_train,
                                       lambda: models.build(mlp_cfg, ds.input_shape, 10, 0.0, "default")),
    }


def bare(x: torch.Tensor, y: torch.Tensor, build: callable, epochs: int, seed: int, dev: torch.device) -> float:
    torch.manual_seed(seed)
    model = build().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=LR, **fast_kwargs("adam", dev))
    x, y = x.to(dev), y.to(dev)
    gen = torch.Generator(device=dev).manual_seed(seed)
    times = []
    for _ in range(epochs):
        model.train()
        t0 = accel.clock(dev)
        loss_sum = torch.zeros((), device=dev)
        perm = torch.randperm(len(y), device=dev, generator=gen)
        for i in range(0, len(y), BATCH):
            idx = perm[i: i + BATCH]
            xb, yb = x[idx], y[idx]
            loss = nn.functional.cross_entropy(model(xb).float(), yb)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss_sum += loss.detach() * len(yb)
        float(loss_sum)
        times.append(accel.clock(dev) - t0)
    return len(y) * (epochs - 1) / sum(times[1:])


def through_context(x: torch.Tensor, y: torch.Tensor, build: callable, epochs: int, seed: int,
                    dev: torch.device) -> float:
    torch.manual_seed(seed)
    ctx = TrialContext({**DEFAULTS, "device": str(dev), "epochs": epochs, "batch_size": BATCH, "lr": LR,
                        "optimizer": "adam"}, seed=seed)
    model, _ = ctx.prepare(build())
    train = ctx.loader((x, y))
    for _ in ctx.epochs():
        model.train()
        for xb, yb in train:
            with ctx.autocast():
                loss = nn.functional.cross_entropy(model(xb).float(), yb)
            ctx.backward(loss)
        ctx.report()
    return ctx._state.result().samples_per_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steadier on a shared machine)")
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = accel.resolve_device(args.device)
    print(f"device {accel.device_name(dev)}; torch {torch.__version__}; {args.epochs} epochs (steady: 2..), "
          f"batch {BATCH}, Adam {LR:g}; median of {args.rounds} interleaved rounds")
    print(f"{'workload':<30}{'bare samples/s':>16}{'context':>12}{'context/bare':>14}{'rounds within 3%':>18}")
    for name, (x, y, build) in workloads().items():
        bare(x, y, build, 2, 0, dev)  # warm-up: kernels, allocator
        through_context(x, y, build, 2, 0, dev)
        b, c = [], []
        for r in range(args.rounds):
            first, second = (bare, through_context) if r % 2 == 0 else (through_context, bare)
            out = {f: f(x, y, build, args.epochs, r, dev) for f in (first, second)}
            b.append(out[bare])
            c.append(out[through_context])
        ratios = [ci / bi for ci, bi in zip(c, b)]
        ok = sum(1 for q in ratios if q >= 0.97)
        print(f"{name:<30}{statistics.median(b):>16,.0f}{statistics.median(c):>12,.0f}"
              f"{statistics.median(ratios):>13.3f}x{ok:>12d} of {args.rounds}")
    print(f"(elapsed {time.process_time():.0f} s of CPU)")


if __name__ == "__main__":
    main()
