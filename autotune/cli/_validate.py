"""`autotune validate`: check a YAML file without running it."""

from __future__ import annotations

import argparse

from autotune.cli import _common as common
from autotune.core._errors import redact


def cmd(args: argparse.Namespace) -> int:
    from autotune.observe import _tracking as tracking
    from autotune.study._study import validate

    cfg = common.load(args)
    validate(cfg)
    tracking.check(cfg)
    n = len(cfg.space)
    print(f"{args.file}: ok: {len(cfg.objectives)} objective(s), {n} searched setting(s), sampler "
          f"{cfg.study.sampler}, storage {redact(cfg.study.storage)}")
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    common.add_study_flags(p)
