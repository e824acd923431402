"""`autotune profile`: one configuration under torch.profiler."""

from __future__ import annotations

import argparse
from pathlib import Path

from autotune.cli import common


def cmd(args: argparse.Namespace) -> int:
    from autotune.observe import profiling

    cfg = common.load(args)
    params = profiling.read_params(Path(args.params)) if args.params else {}
    result, trace, table = profiling.profile(cfg, params, args.epochs, Path(args.out))
    print(table)
    print(f"input wait: {result.data_wait_fraction:.1%} of step time; {result.samples_per_s:,.0f} samples/s; "
          f"train time {result.train_time_s:.2f}s over {result.epochs_run} epoch(s)")
    print(f"chrome trace: {trace}")
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="YAML run file (its fixed settings are used)")
    p.add_argument("--params", help="YAML of settings to apply (e.g. the file `autotune best --export` wrote)")
    p.add_argument("--epochs", type=int, default=1, help="epochs to profile (default 1)")
    p.add_argument("--out", default="studies", help="folder for the trace (default studies/)")
