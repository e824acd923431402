"""`autotune report`: one self-contained HTML report of a study, from its run file or its storage."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from autotune.cli import common
from autotune.core import ConfigError, file_stem, without_user_code


def _study_and_config(target: str | None, storage: str | None, name: str | None) -> tuple[Any, Any]:
    """(study, RunConfig) from a YAML run file, or from --storage and a study name stored there."""
    from autotune.study import storage as storage_mod

    if target is not None and (Path(target).is_file() or target.endswith((".yaml", ".yml"))):
        from autotune.config import load
        from autotune.study import open_study

        cfg = load(target, {k: v for k, v in (("study.storage", storage), ("study.name", name)) if v})
        return open_study(cfg, create=False, read_only=True), cfg
    if storage is None:
        raise ConfigError("autotune report", "--storage", f"{target!r} is not a YAML file: give the run file, or "
                                                          f"--storage URL with the study name")
    return storage_mod.load_stored(storage, name or target, read_only=True)


def cmd(args: argparse.Namespace) -> int:
    """Read-only: the code a run file or a study names (trainer, factories) is never imported here, and the
    default file name is the study's name made safe (a stored name like `../../x` writes `_.._x.html` here)."""
    from autotune.observe import report
    from autotune.study import faults_named

    if args.target is None and args.storage is None:
        raise ConfigError("autotune report", "FILE_OR_STUDY", "give the YAML run file, or --storage URL --study NAME")
    with without_user_code():
        study, cfg = _study_and_config(args.target, args.storage, args.study)
        out = common.output_file(Path(args.output or f"{file_stem(study.study_name)}.html"),
                                 args.target or "autotune report", "-o", reads=[args.target])
        with faults_named(cfg):  # (the trials read here; a full disk under the HTML file is not the storage's)
            study.get_trials(deepcopy=False)
        path = report.write(study, cfg, out)
    print(f"wrote {path} ({len(study.trials)} trials, {path.stat().st_size / 1e6:.1f} MB, opens offline)")
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", nargs="?", metavar="FILE_OR_STUDY", help="the YAML run file, or a study name with "
                                                                         "--storage")
    p.add_argument("-o", "--output", metavar="PATH", help="HTML file to write (default: STUDY_NAME.html)")
    p.add_argument("--storage", help="storage URL (overrides study.storage; alone: a study stored there)")
    p.add_argument("--study", help="study name in --storage (default: the only one)")
