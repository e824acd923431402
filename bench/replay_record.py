"""Record a workload for the replay benchmark: configurations drawn quasi-randomly across a search space, each
trained to the space's maximum epochs, every epoch's validation metrics and clocks kept.

    python bench/replay_record.py --space search_spaces/mnist1d.yaml --n 300 [--out bench/recordings/mnist1d.jsonl]

The clock is the training thread's CPU time (`time.thread_time`), not the wall clock: torch runs on one thread,
so that thread's CPU time is the training's own cost, the same whatever else the machine runs (a recording taken
beside other busy processes would otherwise bake their load into some configurations and not others). The
script replaces `time.perf_counter` with it before autotune is imported, so every autotune clock (train_time_s,
samples_per_s, the epoch clock) reads it; each configuration's wall time is kept beside it, to show how
contended the machine was.

Epochs: each configuration trains for the space's highest `epochs`; a replayed trial of E epochs reads the first
E (exact when the learning rate does not depend on the planned epoch count: constant schedules; the digits
space's cosine and one-cycle schedules are recorded over their own maximum horizon, an approximation said in the
file's header).

The output is JSON lines, appended as each configuration finishes (an interrupted recording resumes where it
stopped): a header line (the space, the machine, the clock), then one line per configuration. `--pack` writes the
gzip'd file the benchmark reads.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WALL = time.perf_counter
time.perf_counter = time.thread_time  # before autotune (and torch) are imported: see the docstring

import optuna  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import autotune  # noqa: E402
from autotune.core import TrialStopped  # noqa: E402
from autotune.fit import TrialPlan, trainer  # noqa: E402
from autotune.search import space  # noqa: E402

EPOCH_KEYS = ("val_accuracy", "val_loss", "train_loss", "train_time_s", "samples_per_s")


def header(cfg: autotune.RunConfig, space_file: str, max_epochs: int) -> dict[str, Any]:
    return {"kind": "header", "space_file": space_file, "max_epochs": max_epochs,
            "space": {k: v.model_dump(exclude_none=True) for k, v in cfg.space.items() if k != "epochs"},
            "clock": "thread_time (torch on 1 thread): train_time_s, end_s and start_s are CPU seconds",
            "machine": {"cpu": _cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
                        "torch": torch.__version__, "optuna": optuna.__version__,
                        "platform": platform.platform()},
            "recorded": time.strftime("%Y-%m-%d")}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def record_one(cfg: autotune.RunConfig, params: dict[str, Any], seed: int) -> dict[str, Any]:
    """Train `params` once to the config's epochs; per epoch, its metrics and when (since the start) it ended."""
    epochs: list[dict[str, Any]] = []
    t0, w0 = time.thread_time(), WALL()
    marks: list[float] = []

    def on_record(rec: Any) -> None:
        d = rec.as_dict()
        marks.append(time.thread_time() - t0)
        epochs.append({k: float(d[k]) for k in EPOCH_KEYS if k in d})

    values = space.fixed_point(cfg, params)
    plan = TrialPlan.of(cfg, values, seed, measure_inference=False, study_rules=False).training
    stop = None
    try:
        trainer.train(plan, on_record=on_record, keep_model=False)
    except TrialStopped as e:
        stop = {"reason": e.reason, "epoch": e.epoch, "detail": e.detail[:200]}
    total, wall = time.thread_time() - t0, WALL() - w0
    # the first epoch's training started after the set-up: end of epoch 1 minus its own epoch (train + eval) time
    for e, m in zip(epochs, marks):
        e["end_s"] = round(m, 5)
    out = {"kind": "config", "params": params, "epochs": epochs, "total_s": round(total, 5), "wall_s": round(wall, 5)}
    if stop is not None:
        out["stop"] = stop
    return out


def points(cfg: autotune.RunConfig, n: int, seed: int) -> list[dict[str, Any]]:
    """`n` points of the space (epochs left out), drawn by Optuna's scrambled Sobol sampler."""
    study = optuna.create_study(sampler=optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=seed,
                                                                               warn_independent_sampling=False))
    out = []
    searched = {k: v for k, v in cfg.space.items() if k != "epochs"}
    for _ in range(n):
        trial = study.ask()
        values = space.sample(trial, cfg)
        out.append({k: values[k] for k in searched if k in values})
        study.tell(trial, 0.0)
    return out


def at_max_epochs(path: Path, max_epochs: int) -> autotune.RunConfig:
    """The space's config with `epochs` fixed at its maximum, torch on one thread, no time limit per trial."""
    raw = yaml.safe_load(path.read_text())
    raw["space"].pop("epochs", None)
    raw.setdefault("train", {}).update({"epochs": max_epochs, "cpu_threads": 1})
    raw.setdefault("pruning", {}).setdefault("slow", {})["max_trial_seconds"] = None
    tmp = Path(tempfile.mkdtemp()) / path.name
    tmp.write_text(yaml.safe_dump(raw))
    return autotune.load_config(tmp)


def rounded(x: Any) -> Any:
    """Floats to 6 significant digits (microseconds of a clock, 1e-6 of an accuracy): the packed file is small."""
    if isinstance(x, float):
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v) for v in x]
    return x


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--space", default="search_spaces/mnist1d.yaml")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--pack", action="store_true", help="write OUT.gz from OUT (sorted keys, no spaces)")
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    torch.set_num_threads(1)
    name = Path(args.space).stem
    out = args.out or ROOT / "bench" / "recordings" / f"{name}.jsonl"
    if args.pack:
        lines = [json.dumps(rounded(json.loads(line)), separators=(",", ":")) for line in out.read_text().splitlines()]
        with gzip.open(out.with_suffix(".jsonl.gz"), "wt") as f:
            f.write("\n".join(lines) + "\n")
        print(f"{out.with_suffix('.jsonl.gz')}: {len(lines) - 1} configurations")
        return
    cfg = autotune.load_config(args.space)
    max_epochs = int(cfg.space["epochs"].high) if "epochs" in cfg.space else int(cfg.train.get("epochs", 10))
    cfg_max = at_max_epochs(Path(args.space), max_epochs)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = len(out.read_text().splitlines()) - 1 if out.exists() else 0
    todo = points(cfg_max, args.n, args.seed)
    with out.open("a") as f:
        if done <= 0:
            f.write(json.dumps(header(cfg, args.space, max_epochs)) + "\n")
            done = 0
        for i, p in enumerate(todo[done:], start=done):
            rec = record_one(cfg_max, p, seed=args.seed * 100_003 + i)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            last = rec["epochs"][-1] if rec["epochs"] else {}
            print(f"[{i + 1}/{args.n}] {len(rec['epochs'])} epochs acc {last.get('val_accuracy', float('nan')):.3f} "
                  f"train {last.get('train_time_s', 0):.2f}s total {rec['total_s']:.2f}s (wall {rec['wall_s']:.2f}s) "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
