"""Start optuna-dashboard (the real package) on a study's storage.

The storage comes from `storage.make_storage`, so SQLite is opened in WAL mode with a 60 s busy
timeout: the dashboard reads while `autotune run` writes the same file, and neither sees
"database is locked". Requests are served by a threaded WSGI server, as optuna-dashboard's own
CLI does, so a slow request (importances) does not stall the page.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import optuna

from autotune.core import AutotuneError


class _ThreadedServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # one line per request would bury the address
        pass


def make_app(storage: optuna.storages.BaseStorage) -> Callable[..., Any]:
    import optuna_dashboard

    return optuna_dashboard.wsgi(storage)


def study_path(storage: optuna.storages.BaseStorage, study_name: str | None) -> str:
    """The dashboard page of `study_name` if the storage holds it yet, else the study list."""
    if study_name:
        try:
            return f"/dashboard/studies/{storage.get_study_id_from_name(study_name)}"
        except KeyError:
            pass
    return "/dashboard/"


def exposure_warning(host: str) -> str | None:
    """The warning for a bind address other machines can reach (None for loopback): the dashboard has no
    authentication, and anyone who reaches it can read every study in the storage and delete studies."""
    import ipaddress

    try:
        loopback = host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        loopback = False
    if loopback:
        return None
    return (f"warning: the dashboard has no authentication: anyone who can reach {host} on this port can read and "
            "delete the studies in this storage; keep the default 127.0.0.1 and use an SSH tunnel "
            "(ssh -L 8080:127.0.0.1:8080 HOST), or put an authenticating proxy in front")


def serve(storage: optuna.storages.BaseStorage, host: str = "127.0.0.1", port: int = 8080,
          study_name: str | None = None, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted. Port 0 picks a free port; `on_ready` gets the address once it listens."""
    warning = exposure_warning(host)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    app = make_app(storage)
    try:
        httpd = make_server(host, port, app, server_class=_ThreadedServer, handler_class=_QuietHandler)
    except OSError as e:
        raise AutotuneError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{httpd.server_port}{study_path(storage, study_name)}"
    (on_ready or (lambda u: print(f"optuna-dashboard at {u}  (Ctrl-C to stop)", flush=True)))(url)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        print("dashboard stopped", file=sys.stderr)
    finally:
        httpd.server_close()
