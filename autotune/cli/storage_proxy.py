"""`autotune storage-proxy`: serve a study's storage over gRPC (Optuna's proxy) to many workers."""

from __future__ import annotations

import argparse
import sys

from autotune.cli import common


def cmd(args: argparse.Namespace) -> int:
    from autotune.study import make_storage, proxy

    cfg = common.load(args)
    file = cfg.file
    proxy.check_backend(cfg.study.storage, file)
    backend = make_storage(cfg)
    if cfg.study.heartbeat_interval is not None:
        print("note: heartbeats do not pass through the proxy: a worker that dies on another machine leaves its "
              "trial RUNNING (one on the proxy's clients' own hosts is still seen)", file=sys.stderr)
    try:
        proxy.serve(backend, cfg.study.storage, file, args.host, args.port, on_ready=lambda line: print(
            f"{line}\nworkers: autotune worker --storage grpc://{args.host}:{args.port} --study {cfg.study.name}"
            f"   (the study must exist: autotune launch {args.file} --storage grpc://{args.host}:{args.port} ...)",
            flush=True))
    except KeyboardInterrupt:
        return 130
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="YAML run file whose study.storage (PostgreSQL, MySQL or SQLite) to serve")
    common.add_study_flags(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only; "
                                                        "0.0.0.0 for every machine: no authentication)")
    p.add_argument("--port", type=common.port, default=13000, help="port (default 13000)")
