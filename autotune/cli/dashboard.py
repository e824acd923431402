"""`autotune dashboard`: optuna-dashboard on a study's storage (live while `autotune run` writes)."""

from __future__ import annotations

import argparse

from autotune.cli import common
from autotune.core import ConfigError, redact, without_user_code


def cmd(args: argparse.Namespace) -> int:
    from autotune.observe import dashboard
    from autotune.study import bare_config, make_storage

    if args.file is None and args.storage is None:
        raise ConfigError("autotune dashboard", "FILE", "give the YAML run file or --storage URL")
    if args.file is not None:  # (read-only: the code the run file names is not imported)
        from autotune.config import load

        with without_user_code():
            cfg = load(args.file, {"study.storage": args.storage} if args.storage else None)
    else:
        cfg = bare_config(args.storage)
    storage = make_storage(cfg, read_only=True)  # nothing written to open it: read-only media too
    print(f"storage {redact(cfg.study.storage)}", flush=True)
    dashboard.serve(storage, host=args.host, port=args.port, study_name=cfg.study.name if args.file else None)
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", help="the YAML run file whose storage to show")
    p.add_argument("--storage", help="storage URL (overrides study.storage, or instead of FILE)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=common.port, default=8080, help="port (default 8080; 0 picks a free one)")
