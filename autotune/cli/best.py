"""`autotune best`: the recommended trial of a study; `--export` it as a YAML, `--save-model` retrain it."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from autotune.cli import common
from autotune.core import AutotuneError, without_user_code


def cmd(args: argparse.Namespace) -> int:
    """Read-only but for --save-model (which retrains, so runs the run file's code): the code the run file names is
    not imported to show or export the best trial."""
    from autotune.observe import TuneResult, progress
    from autotune.study import faults_named, open_study

    with without_user_code() if not args.save_model else contextlib.nullcontext():
        cfg = common.load(args)
        for flag, out in (("--export", args.export), ("--save-model", args.save_model)):  # before any work
            if out:
                common.output_file(Path(out), args.file, flag, reads=[args.file])
        study = open_study(cfg, create=False, read_only=True)
        result = TuneResult(study=study, config=cfg)
        with faults_named(cfg):
            best = result.best
        if best is None:
            raise AutotuneError(f"study {cfg.study.name!r} has no completed trial yet")
        progress.print_best(result)
        if args.export:
            from autotune.observe import export_best

            path = export_best(cfg, best, Path(args.export))
            print(f"wrote {path}")
    if args.save_model:
        from autotune.study import retrain_best

        path = retrain_best(cfg, study, best, Path(args.save_model))
        print(f"wrote {path} (state dict of trial {best.number}'s settings, retrained; use it as model.checkpoint)")
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the study's YAML run file")
    common.add_study_flags(p)
    p.add_argument("--export", metavar="PATH", help="write a YAML with every setting of the best trial fixed")
    p.add_argument("--save-model", metavar="PATH", help="retrain the best trial's settings and save the model's "
                                                        "state dict (a warm start for model.checkpoint)")
