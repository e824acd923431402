"""`autotune validate`: check a YAML file without running it."""

from __future__ import annotations

import argparse
import sys

from autotune.cli import common
from autotune.core import redact


def cmd(args: argparse.Namespace) -> int:
    from autotune.fit import notes
    from autotune.observe import tracking
    from autotune.study import validate

    cfg = common.load(args)
    validate(cfg)
    tracking.check(cfg)
    for note in notes(cfg):  # valid, but maybe not what it seems to mean
        print(f"note: {note}", file=sys.stderr)
    n = len(cfg.space)
    print(f"{args.file}: ok: {len(cfg.objectives)} objective(s), {n} searched setting(s), sampler "
          f"{cfg.study.sampler}, storage {redact(cfg.study.storage)}")
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    common.add_study_flags(p)
