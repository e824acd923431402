"""What a competing busy process does to a CPU trial, at each torch thread count (not a test).

The digits CNN ([32, 64] / 128, batch 64, fp32) is trained by `autotune.train` for a few epochs at each thread
count (all the cores, half, one), first quiet, then with `--competitors` Python processes spinning on the cores
(bounded in time, always killed). Per condition: the median epoch time, its ratio to the quiet epoch at all
the cores (the baseline, measured in the same run), and the share of its runnable time this process spent
waiting for a core (contention.Share: what the objective's oversubscription check reads).

    python bench/oversubscribe.py [--epochs 3] [--competitors N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import autotune  # noqa: E402
from autotune import config  # noqa: E402
from autotune.core import contention  # noqa: E402

SPIN = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"


def epoch_s(cfg: config.RunConfig, threads: int, epochs: int) -> tuple[float, float]:
    """(median epoch seconds, waiting share) of one run at `threads`."""
    w = contention.Window(threads)
    tr = autotune.train(cfg, params={"cpu_threads": threads, "epochs": epochs})
    share = w.share()
    return statistics.median(r.epoch_time_s for r in tr.history), share.waiting


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--competitors", type=int, default=None, help="busy processes (default: one per core)")
    args = p.parse_args()
    cores = contention.cores()
    n = args.competitors or cores
    counts = sorted({cores, max(1, cores // 2), 1}, reverse=True)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config.from_dict({"study": {"name": "o", "storage": f"sqlite:///{tmp}/o.db"},
                                "data": {"name": "digits"},
                                "model": {"name": "cnn", "channels": [32, 64], "hidden": 128},
                                "objectives": [{"metric": "val_accuracy"}],
                                "train": {"device": "cpu", "batch_size": 64, "precision": "fp32"}})
        autotune.train(cfg, params={"epochs": 1})  # imports, data, allocator: not in any figure
        rows = [("quiet", t, *epoch_s(cfg, t, args.epochs)) for t in counts]
        procs = [subprocess.Popen([sys.executable, "-c", SPIN.format(s=600)]) for _ in range(n)]
        try:
            time.sleep(0.3)
            rows += [(f"{n} busy", t, *epoch_s(cfg, t, args.epochs)) for t in counts]
        finally:
            for proc in procs:
                proc.kill()
            for proc in procs:
                proc.wait()
    base = rows[0][2]
    print(f"digits CNN, batch 64, {args.epochs} epochs per row, {cores} cores, torch {torch.__version__}; "
          f"baseline: quiet at {counts[0]} threads, {base:.3f} s/epoch")
    print(f"{'condition':>10} {'threads':>7} {'s/epoch':>8} {'vs base':>8} {'waiting':>8}")
    for cond, t, s, waiting in rows:
        print(f"{cond:>10} {t:>7} {s:>8.3f} {base / s:>7.2f}x {waiting:>8.0%}")


if __name__ == "__main__":
    main()
