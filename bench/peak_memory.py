"""Peak memory per batch size, precision and data placement on the digits space, measured here (not a test).

Each configuration trains search_spaces/memory.yaml's model on digits through `autotune.train` in a fresh process
of its own (so no configuration's freed-but-kept heap counts in another's), and prints the trial's
`peak_memory_mb` (training/context/memory.py: on CPU the process's resident-set high-water mark over the trial's
training, reset at its start; the Python + torch process it runs in is part of it), the method that measured it,
and its ratio to the baseline (fp32, batch 32, data_on_device false) measured in the same run; also the
training's samples/s, for the trade-off.

    python bench/peak_memory.py [--epochs 2] [--batches 32,256,1024] [--threads 1]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "search_spaces" / "memory.yaml"


def one(batch: int, precision: str, on_device: bool, epochs: int) -> dict[str, object]:
    """One configuration, trained in this process (the child's side)."""
    sys.path.insert(0, str(ROOT))
    import autotune

    cfg = autotune.load_config(str(SPACE), overrides={"study.n_trials": 1})
    r = autotune.train(cfg, params={"batch_size": batch, "precision": precision, "data_on_device": on_device,
                                    "epochs": epochs, "lr": 3e-3, "optimizer": "adam"})
    return {"peak_memory_mb": r.peak_memory_mb, "method": r.meters["peak_memory_mb"],
            "samples_per_s": r.samples_per_s, "val_accuracy": r.val_accuracy}


def child(args: argparse.Namespace, batch: int, precision: str, on_device: bool) -> dict[str, object]:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(ROOT)}
    code = (f"import json, bench.peak_memory as b; print(json.dumps(b.one({batch}, {precision!r}, {on_device}, "
            f"{args.epochs})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batches", default="32,256,1024")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    print(f"peak memory on digits ({SPACE.name}'s model), {args.epochs} epochs, {args.threads} torch thread(s), "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    print(f"{'batch':>6} {'precision':>9} {'on device':>9} {'peak MB':>8} {'vs base':>8} {'samples/s':>10} "
          f"{'val acc':>7}  method")
    base = None
    for batch, precision, on_device in itertools.product(batches, ("fp32", "bf16"), (False, True)):
        r = child(args, batch, precision, on_device)
        peak = float(r["peak_memory_mb"])  # type: ignore[arg-type]
        base = base or peak  # the first row: fp32, the smallest batch, data in a DataLoader
        print(f"{batch:>6} {precision:>9} {str(on_device):>9} {peak:>8.1f} {peak / base:>7.3f}x "
              f"{float(r['samples_per_s']):>10,.0f} {float(r['val_accuracy']):>7.3f}  {r['method']}",  # type: ignore[arg-type]
              flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
