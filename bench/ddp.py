"""One trial on 1 vs 2 processes (DistributedDataParallel over gloo) on the CPU: what `devices: 2` buys here.

The same digits CNN, global batch, lr and seed through `autotune.train` (the built-in trainer): (a) one process,
one torch thread; (b) one process, two threads (`cpu_threads: 2`: the other way to use a second core); (c)
`devices: 2`, two processes of one thread each, every step's gradients all-reduced over gloo. Arms run in
interleaved rounds (a slow spell of a shared machine hits all alike); each figure is the median over rounds of
samples/s over the steady epochs (2..E, every rank's samples counted), the training time and the wall time of the
whole call (the launcher, the ranks' data loading and model building included; the first round also starts the
forkserver, so it is left out of the wall medians), and the final validation accuracy. Last, what one step's
communication costs here: the median time of a gloo all-reduce between 2 processes of the model's gradients
(fp32) and of one float (the latency). Not a test.

    python bench/ddp.py [--rounds 5] [--epochs 4] [--batch 128] [--model cnn|mlp]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import autotune  # noqa: E402
from autotune import config  # noqa: E402
from autotune.training.distributed.devices import cpu_cores  # noqa: E402

MODELS = {"cnn": {"name": "cnn", "channels": [32, 64], "hidden": 128},
          "mlp": {"name": "mlp", "hidden": 256}}
ARMS: list[tuple[str, dict[str, Any]]] = [
    ("(a) 1 process, 1 thread", {"devices": 1, "cpu_threads": 1}),
    ("(b) 1 process, 2 threads", {"devices": 1, "cpu_threads": 2}),
    ("(c) devices 2: 2 processes x 1 thread (gloo)", {"devices": 2, "cpu_threads": 0}),
]


def _allreduce(rank: int, port: int, sizes: list[int], out: Any) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, is_master=False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    for n in sizes:
        t = torch.randn(n)
        times = []
        for i in range(220):
            t0 = time.perf_counter()
            dist.all_reduce(t)
            if i >= 20:  # after warm-up
                times.append(time.perf_counter() - t0)
        if rank == 0:
            out.put((n, statistics.median(times)))
    dist.destroy_process_group()


def allreduce_ms(sizes: list[int]) -> dict[int, float]:
    import torch.distributed as dist
    import torch.multiprocessing as mp

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    out = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_allreduce, args=(store.port, sizes, out), nprocs=2)
    return {n: ms * 1e3 for n, ms in (out.get() for _ in sizes)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--model", choices=sorted(MODELS), default="cnn")
    args = ap.parse_args()
    torch.set_num_threads(2)  # the ranks of (c) get 2 // 2 = 1 thread each
    cfg = config.from_dict({
        "study": {"seed": 0}, "model": MODELS[args.model],
        "train": {"device": "cpu", "epochs": args.epochs, "batch_size": args.batch, "lr": 2e-3},
    }, source=str(Path(__file__).resolve()))
    print(f"== digits, {args.model} {MODELS[args.model]}, global batch {args.batch}, {args.epochs} epochs, Adam 2e-3; "
          f"{cpu_cores()} CPU cores (load average {os.getloadavg()[0]:.1f} at the start); torch {torch.__version__}; "
          f"{args.rounds} interleaved rounds, medians")
    figures: dict[str, dict[str, list[float]]] = {name: {"sps": [], "train": [], "wall": [], "acc": []}
                                                  for name, _ in ARMS}
    for rnd in range(args.rounds):
        for name, params in ARMS:
            t0 = time.perf_counter()
            r = autotune.train(cfg, params=params, seed=0)
            wall = time.perf_counter() - t0
            f = figures[name]
            f["sps"].append(r.samples_per_s)
            f["train"].append(r.train_time_s)
            f["acc"].append(r.val_accuracy)
            if rnd > 0 or params["devices"] == 1:  # round 0 of (c) also started the forkserver
                f["wall"].append(wall)
            print(f"  round {rnd + 1}: {name:<46} {r.samples_per_s:>9,.0f} samples/s  train {r.train_time_s:6.2f} s"
                  f"  wall {wall:6.2f} s  val acc {r.val_accuracy:.4f}", flush=True)
    base = statistics.median(figures[ARMS[0][0]]["sps"])
    two_threads = statistics.median(figures[ARMS[1][0]]["sps"])
    print(f"\n  {'arm':<46} {'samples/s':>10} {'vs (a)':>7} {'vs (b)':>7} {'train s':>8} {'wall s':>7} {'val acc':>7}")
    for name, _ in ARMS:
        f = figures[name]
        sps = statistics.median(f["sps"])
        print(f"  {name:<46} {sps:>10,.0f} {sps / base:>6.2f}x {sps / two_threads:>6.2f}x "
              f"{statistics.median(f['train']):>8.2f} {statistics.median(f['wall'] or [math.nan]):>7.2f} "
              f"{statistics.median(f['acc']):>7.4f}")
    params = sum(p.numel() for p in r.model.parameters())
    ms = allreduce_ms([params, 1])
    print(f"\n  gloo all-reduce, 2 processes, median of 200: {params:,} floats (the model's gradients) "
          f"{ms[params]:.2f} ms, 1 float {ms[1]:.2f} ms; one step of (a) at batch {args.batch}: "
          f"{args.batch / base * 1e3:.1f} ms ({args.batch // 2} samples per rank in (c))")


if __name__ == "__main__":
    main()
