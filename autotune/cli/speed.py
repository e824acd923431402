"""`autotune speed`: samples/s of every combination of the acceleration settings a YAML file searches."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from autotune.cli import common


def cmd(args: argparse.Namespace) -> int:
    from autotune.fit import load_fit, preflight
    from autotune.speed import sweep as speed

    cfg = common.load(args)
    preflight(cfg)  # device, data, model: a mistake is one line before any probe runs
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    combos = speed.combinations(cfg)
    print(speed.header(cfg, len(combos)), flush=True)
    note = speed.compile_note(combos, not args.no_compile, args.budget)
    if note:
        print(f"note: {note}", flush=True)
    done = [0]

    def progress(row: Any) -> None:
        done[0] += 1
        print(speed.row_line(row, done[0], len(combos)), file=sys.stderr, flush=True)

    rows = speed.run(cfg, load_fit(cfg), include_compile=not args.no_compile, budget_s=args.budget, on_row=progress)
    print(speed.table(rows))
    busy = speed.busy_note(rows, torch.get_num_threads())
    if busy:
        print(f"warning: {busy}", file=sys.stderr, flush=True)
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="YAML run file: its model, data (or trainer) and searched acceleration settings")
    p.add_argument("--no-compile", action="store_true", help="leave out combinations with compile: true")
    p.add_argument("--budget", type=float, default=120.0, help="seconds for the whole table (default 120); "
                                                              "combinations not probed by then are listed as such")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
