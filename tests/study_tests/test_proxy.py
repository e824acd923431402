"""grpc://HOST:PORT storages: a real `autotune storage-proxy` process on 127.0.0.1, `autotune worker` processes
through it sharing a study exactly, and what orphans/locks/records still do through a proxy."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autotune import config
from autotune.cli import app as cli
from autotune.core import locks
from autotune.core.errors import ConfigError
from autotune.study import orphans, proxy
from autotune.study import runner as study_mod
from autotune.study import storage as storage_mod
from tests.support import assert_exact, env, finish, load, write_cfg
from tests.support import start_autotune as autotune


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, subprocess.Popen[str]]]:
    """(the study's YAML on a SQLite file, the proxy's grpc:// URL, the proxy process). One proxy for the module
    (starting one costs about 3 s): each test uses a study name of its own on it."""
    tmp_path = tmp_path_factory.mktemp("proxy")
    path = write_cfg(tmp_path, f"sqlite:///{tmp_path}/p.db", 6, name="p")
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "autotune", "storage-proxy", str(path), "--port", str(port)],
                         cwd=tmp_path, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"grpc://127.0.0.1:{port}"
    try:
        proxy.connect(url, "test", timeout=60).close()
        yield path, url, p
    finally:
        p.terminate()
        p.communicate(timeout=30)


def test_two_workers_through_the_proxy_share_the_study_exactly(served: tuple[Path, str, Any], tmp_path: Path) -> None:
    path, url, server = served
    cfg = config.load(path, {"study.storage": url})
    study_mod.open_study(cfg)  # created through the proxy
    ws = [autotune("worker", "--storage", url, "--study", "p", cwd=tmp_path) for _ in range(2)]
    for w in ws:
        rc, out, err = finish(w, timeout=300)
        assert rc == 0, err
        assert "joined study p (grpc://127.0.0.1:" in out
    done = assert_exact(load(path), 6)  # read from the SQLite file behind the proxy
    owners = {orphans.owner_of(t) for t in done}
    # stamped by the workers, not by the proxy process that wrote them
    assert owners and all(o is not None and o.pid in {w.pid for w in ws} for o in owners), owners
    assert all("history" in t.user_attrs for t in done)  # a trial's attrs reach the database through the proxy


def test_orphans_and_locks_degrade_through_the_proxy(served: tuple[Path, str, Any]) -> None:
    path, url, server = served
    cfg = config.load(path, {"study.storage": url, "study.name": "orphans"})  # (the shared proxy's "p" is another's)
    study = study_mod.open_study(cfg)
    assert not orphans.heartbeats(study)  # none through a proxy: only this host's dead workers are seen
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stamp = f"{socket.gethostname()}:{dead.pid}"
    study.add_trial(optuna.trial.create_trial(state=TrialState.RUNNING, params={"lr": 0.01},
                                              distributions={"lr": optuna.distributions.FloatDistribution(
                                                  1e-3, 1e-1, log=True)},
                                              user_attrs={orphans.OWNER_ATTR: stamp}))
    assert orphans.reap(study) == [0]
    again = optuna.load_study(study_name="orphans", storage=storage_mod.make_storage(cfg))
    states = [t.state for t in again.get_trials()]
    assert states == [TrialState.FAIL, TrialState.WAITING]  # failed once, retried once
    assert again.trials[0].user_attrs["stop_reason"] == orphans.REASON
    # two handles on one proxy take the same host locks
    assert locks.storage_key(study) == locks.storage_key(again) == f"GrpcStorageProxy({url})"


def test_grpc_urls_and_refusals_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    path = write_cfg(tmp_path, f"journal:///{tmp_path}/j.log", 6, name="j")
    for url, text in (("grpc://nohost", "must be grpc://HOST:PORT"),
                      (f"grpc://127.0.0.1:{free_port()}", "no storage proxy answered within 0.2s")):
        monkeypatch.setattr(proxy, "CONNECT_S", 0.2)
        with pytest.raises(ConfigError, match=rf"j\.yaml: study\.storage: .*{text}"):
            storage_mod.make_storage(config.load(path, {"study.storage": url}))
    assert cli.main(["storage-proxy", str(path)]) == 2
    assert "study.storage: Optuna's gRPC proxy cannot serve a journal file" in capsys.readouterr().err
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "grpc" else real(name, *a))
    with pytest.raises(ConfigError, match=r"needs grpcio: pip install 'autotune\[grpc\]'"):
        storage_mod.make_storage(config.load(path, {"study.storage": "grpc://127.0.0.1:1"}))


def test_a_busy_port_is_one_line(served: tuple[Path, str, Any], tmp_path: Path) -> None:
    path, url, _ = served
    t0 = time.monotonic()
    rc, out, err = finish(autotune("storage-proxy", str(path), "--port", url.rpartition(":")[2], cwd=tmp_path), 60)
    assert rc == 2 and err.strip().count("\n") == 0 and "--port: cannot listen on 127.0.0.1:" in err, err
    assert time.monotonic() - t0 < 60
