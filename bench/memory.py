"""Memory over a long study, measured here and now (not a test): N consecutive real trials in one process.

After every trial (Optuna's trial callback, once the objective has released what the trial held) this
records the process's resident set size (RSS, /proc/self/statm) and, where CUDA is present, the bytes the
CUDA caching allocator holds for tensors (`torch.cuda.memory_allocated`) against the value before the
first trial. It prints
- RSS after trial 1, after the warm-up (trial 20) and at the end, and the growth after the warm-up
  (goal: <= 5 % over 200 trials);
- the growth slope after the warm-up (least squares, KiB per trial) and the growth it projects over
  180 post-warm-up trials: the check that also holds for shorter runs (`--trials 60`), so a slow test
  can catch a leak without running 200 trials;
- RSS after every trial (MiB, rows of 20);
- CUDA: allocated bytes after trial 1 over the value before it (one-time state that outlives a trial,
  e.g. cuBLAS workspaces, which the caching allocator counts), and the largest excess of any later
  trial over trial 1's (goal: 0: every trial gives back all it took).

The study is the default path (`autotune.run`: SQLite storage, TPE, the built-in trainer) on a small
CNN over digits, 1 epoch per trial, searching optimizer, lr, batch size, precision, init and dropout so
trials differ. `--factory` swaps in a user model factory (tests.factories:leaky_net leaks on purpose:
the check must fail on it).

    python bench/memory.py                            # 200 trials on CPU
    python bench/memory.py --device cuda              # the same on a GPU, CUDA check included
    python bench/memory.py --trials 60 --json m.json  # what the slow test runs
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402
import torch  # noqa: E402

from autotune import config  # noqa: E402
from autotune.study import runner as study_mod  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)
PROJECT_TO = 180  # post-warm-up trials of the 200-trial goal
MAX_GROWTH = 0.05

SPACE = {
    "lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
    "optimizer": {"type": "categorical", "choices": ["sgd", "adam", "adamw"]},
    "batch_size": {"type": "categorical", "choices": [32, 64, 128]},
    "precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
    "init": {"type": "categorical", "choices": ["default", "kaiming_normal"]},
    "dropout": {"type": "float", "low": 0.0, "high": 0.3},
}


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the peak, which only grows (a leak still shows)
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def slope(ys: list[float]) -> float:
    """Least-squares slope of ys against 0, 1, 2, ... (per step)."""
    n = len(ys)
    if n < 2:
        return 0.0
    mx = (n - 1) / 2
    my = sum(ys) / n
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2 for i in range(n))


def measure(n_trials: int, device: str, factory: str | None, folder: Path) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "study": {"name": "memory", "storage": f"sqlite:///{folder}/memory.db", "n_trials": n_trials, "seed": 0},
        "objectives": ["val_accuracy", "train_time_s"],
        "data": {"name": "digits"},
        "model": {"factory": factory} if factory else {"name": "cnn", "channels": [8, 16], "hidden": 32},
        "train": {"device": device, "epochs": 1, "data_fraction": 0.3},
        "space": SPACE,
        "pruning": {"pruner": "none"},
    }
    cfg = config.from_dict(raw, source=str(folder / "memory.yaml"))
    cuda = torch.cuda.is_available() and device != "cpu"
    rss: list[int] = []
    cuda_excess: list[int] = []
    base: dict[str, int] = {}
    states: list[str] = []

    def on_start(study: optuna.Study, todo: int) -> None:
        if cuda:
            torch.cuda.synchronize()
            base["cuda"] = torch.cuda.memory_allocated()

    def on_trial(study: optuna.Study, t: optuna.trial.FrozenTrial) -> None:
        states.append(t.state.name)
        rss.append(rss_bytes())
        if cuda:
            torch.cuda.synchronize()
            cuda_excess.append(torch.cuda.memory_allocated() - base["cuda"])

    t0 = time.perf_counter()
    study_mod.run(cfg, callbacks=[on_trial], on_start=on_start)
    wall = time.perf_counter() - t0
    return {"rss": rss, "cuda_excess": cuda_excess, "states": states, "wall_s": wall, "device": device,
            "factory": factory, "cuda": cuda}


def verdict(m: dict[str, Any], warmup: int) -> dict[str, Any]:
    rss = m["rss"]
    w = min(warmup, len(rss)) - 1
    after = rss[w:]
    per_trial = slope([float(x) for x in after])
    growth = (rss[-1] - rss[w]) / rss[w]
    projected = per_trial * PROJECT_TO / rss[w]
    cuda = m["cuda_excess"]
    cuda_first = cuda[0] if cuda else 0
    cuda_max = max((x - cuda_first for x in cuda[1:]), default=0)
    ok = projected <= MAX_GROWTH and (len(rss) < warmup + PROJECT_TO or growth <= MAX_GROWTH) and cuda_max <= 0
    return {"rss_first": rss[0], "rss_warm": rss[w], "rss_last": rss[-1], "growth_after_warmup": growth,
            "slope_bytes_per_trial": per_trial, "projected_growth": projected, "cuda_first_excess_bytes": cuda_first,
            "cuda_max_excess_bytes": cuda_max, "ok": ok}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    ap.add_argument("--factory", help="a model factory instead of the built-in CNN, e.g. tests.factories:leaky_net")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: a shared machine)")
    ap.add_argument("--json", help="also write the series and the verdict to this file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        m = measure(args.trials, args.device, args.factory, Path(tmp))
    v = verdict(m, args.warmup)
    mib = 2 ** 20
    n = len(m["rss"])
    print(f"{n} trials in one process on {m['device']}"
          + (f" (model {m['factory']})" if m["factory"] else " (cnn on digits, 1 epoch each)")
          + f": {m['wall_s']:.0f}s, {60 * n / m['wall_s']:.0f} trials/min; states "
          + ", ".join(f"{s} {m['states'].count(s)}" for s in sorted(set(m["states"]))))
    print(f"RSS after trial 1: {v['rss_first'] / mib:.1f} MiB; after trial {min(args.warmup, n)}: "
          f"{v['rss_warm'] / mib:.1f} MiB; after trial {n}: {v['rss_last'] / mib:.1f} MiB")
    print(f"growth after the warm-up: {100 * v['growth_after_warmup']:+.2f}% (goal <= {100 * MAX_GROWTH:.0f}% "
          f"over 200 trials)")
    print(f"slope after the warm-up: {v['slope_bytes_per_trial'] / 1024:+.1f} KiB/trial -> "
          f"{100 * v['projected_growth']:+.2f}% over {PROJECT_TO} trials")
    if m["cuda"]:
        print(f"CUDA allocated after trial 1 vs before it: {v['cuda_first_excess_bytes']:+d} bytes (kept from trial 1 "
              f"on); after any later trial vs after trial 1: max {v['cuda_max_excess_bytes']:+d} bytes (goal <= 0)")
    else:
        print("CUDA: not used here (no check)")
    print("RSS per trial (MiB):")
    for i in range(0, n, 20):
        print(f"  {i + 1:>4}-{min(i + 20, n):>4}: " + " ".join(f"{x / mib:.1f}" for x in m["rss"][i:i + 20]))
    print(f"verdict: {'ok' if v['ok'] else 'LEAK'}")
    if args.json:
        Path(args.json).write_text(json.dumps({**m, **v}))
    return 0 if v["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
