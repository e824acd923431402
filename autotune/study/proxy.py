"""Hundreds of workers on one study through one process: Optuna's gRPC storage proxy (`pip install
'autotune[grpc]'`). `autotune storage-proxy FILE` serves the study's storage (PostgreSQL, MySQL or SQLite: the
proxy holds the database connections and caches trials, so the database sees one client, not hundreds);
workers open it as `grpc://HOST:PORT`.

Through the proxy every trial is still stamped with its owner by the worker (the proxy's client below), so a
dead worker on the worker's own host is still seen; heartbeats do not pass through it (its API has none), so a
dead worker on another host is not. There is no authentication: keep the port on a private network.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core import ConfigError, redact
from autotune.study import orphans

PREFIX = "grpc://"
INSTALL = "pip install 'autotune[grpc]'"
CONNECT_S = 10.0


def address(url: str, file: str, key: str = "study.storage") -> tuple[str, int]:
    """(host, port) of `grpc://HOST:PORT`."""
    host, _, port = url[len(PREFIX):].rstrip("/").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(file, key, f"must be grpc://HOST:PORT, e.g. grpc://proxy.example.org:13000; got {url!r}")
    return host.strip("[]"), int(port)


def _need_grpc(file: str, key: str) -> None:
    if importlib.util.find_spec("grpc") is None:
        raise ConfigError(file, key, f"the gRPC storage proxy needs grpcio: {INSTALL}")


class StampingProxy(optuna.storages.GrpcStorageProxy):
    """Optuna's gRPC proxy client that stamps a trial's owner as it creates or takes it (orphans.py), here in the
    worker: stamped by the server, every trial would look owned by the proxy process."""

    def __init__(self, *, host: str = "localhost", port: int = 13000) -> None:
        self.address = f"{host}:{port}"  # (kept by pickling: GrpcStorageProxy pickles its __dict__)
        super().__init__(host=host, port=port)

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        return super().create_new_trial(study_id, template_trial or orphans._owned_trial())

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Any = None) -> bool:
        return orphans._taken(self, trial_id, state, super().set_trial_state_values(trial_id, state, values))

    def __repr__(self) -> str:  # what locks.storage_key keys a host's locks on: the same for every worker
        return f"GrpcStorageProxy({PREFIX}{self.address})"


def connect(url: str, file: str, timeout: float | None = None) -> optuna.storages.BaseStorage:
    """The proxy at `url`, once it answers; none answering within `timeout` (default CONNECT_S) is a ConfigError."""
    timeout = CONNECT_S if timeout is None else timeout
    host, port = address(url, file)
    _need_grpc(file, "study.storage")
    import warnings

    with warnings.catch_warnings():  # GrpcStorageProxy is "experimental" since Optuna 4.2
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = StampingProxy(host=host, port=port)
    try:
        storage.wait_server_ready(timeout=timeout)
    except ConnectionError:
        storage.close()
        raise ConfigError(file, "study.storage", f"cannot reach {url}: no storage proxy answered within "
                                                 f"{timeout:g}s (start one: autotune storage-proxy FILE --port "
                                                 f"{port})") from None
    return storage


def check_backend(url: str, file: str) -> None:
    """What the proxy can serve: an RDB storage, not a journal file (Optuna's proxy does not support it,
    optuna#6084) nor another proxy."""
    if url.startswith(PREFIX):
        raise ConfigError(file, "study.storage", f"{url} is a proxy already: give the database the proxy serves "
                                                 "(postgresql://..., mysql://... or sqlite:///...)")
    if url.startswith("journal://"):
        raise ConfigError(file, "study.storage", "Optuna's gRPC proxy cannot serve a journal file; use "
                                                 "postgresql://..., mysql://... or sqlite:///... behind it")


def _check_free(host: str, port: int, file: str) -> None:
    """Is host:port free? gRPC binds with SO_REUSEPORT, so a second proxy on a busy port would start and share
    it with the first; a plain bind fails instead."""
    import socket

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, port))
    except OSError as e:
        raise ConfigError(file, "--port", f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def serve(backend: optuna.storages.BaseStorage, url: str, file: str, host: str, port: int,
          on_ready: Callable[[str], None] | None = None) -> None:
    """Serve `backend` (the study's storage, `url`) at host:port until interrupted."""
    _need_grpc(file, "--port")
    import warnings

    from optuna.storages import get_storage, run_grpc_proxy_server

    _check_free(host, port, file)
    if on_ready is not None:
        on_ready(f"serving {redact(url)} at {PREFIX}{host}:{port} (no authentication; Ctrl-C stops it)")
    with warnings.catch_warnings():  # "experimental" since Optuna 4.2
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:  # get_storage: Optuna's in-process trial cache in front of an RDB, as its proxy docs advise
            run_grpc_proxy_server(get_storage(backend), host=host, port=port)
        except RuntimeError as e:  # grpc: "Failed to bind to address ..."
            raise ConfigError(file, "--port", f"cannot listen on {host}:{port}: {e}") from None


__all__ = ["PREFIX", "StampingProxy", "address", "check_backend", "connect", "serve"]
