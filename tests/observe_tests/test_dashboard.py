"""`autotune dashboard`: the real optuna-dashboard answering HTTP while `autotune run` writes the same SQLite file."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import requests

import autotune
from autotune.cli import app as cli
from autotune.study import storage as storage_mod
from tests.support import TINY, Proc
from tests.support import attrs_of as _attrs
from tests.support import start_dashboard as _start_dashboard

ROOT = Path(__file__).resolve().parents[2]


def test_dashboard_serves_a_study_while_it_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'live.db'}"
    n_trials = 12
    # optuna-dashboard caches a study's trial list for 2 s (under 100 trials), and the pareto pruner ends most
    # tiny trials after one epoch: the run could finish inside one cache window. Unpruned 6-epoch trials keep
    # it going for several windows (12 of them: about 0.5 s each on 2 quiet cores, 3 windows; 24 took twice as long
    # and checked nothing more), and most of that time a trial is RUNNING.
    live = tmp_path / "live.yaml"
    text = TINY.read_text().replace("epochs: 2", "epochs: 6").replace("pruner: pareto", "pruner: none")
    live.write_text(text)
    # The schema exists before either process starts, as after any earlier `autotune run`.
    storage_mod.make_storage(autotune.load_config(str(live), {"study.storage": url}))
    dash, base = _start_dashboard(url)  # listening before the run starts: it must see the study grow
    run = Proc("run", str(live), "--storage", url, "--n-trials", str(n_trials), "--plain")
    try:
        seen_live: list[int] = []  # finished-trial counts the API listed while the run was still going
        detail: dict[str, Any] = {}
        seen_running = False  # a trial in progress, as the run's process wrote it
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            running = run.p.poll() is None
            studies = requests.get(f"{base}/api/studies", timeout=30).json()["study_summaries"]
            ids = [s["study_id"] for s in studies if s["study_name"] == "tiny"]
            if ids:
                detail = requests.get(f"{base}/api/studies/{ids[0]}", timeout=30).json()
                done = [t for t in detail["trials"] if t["state"] in ("Complete", "Pruned")]
                if running and done:
                    seen_live.append(len(done))
                seen_running = seen_running or any(t["state"] == "Running" for t in detail["trials"])
                if not running and len(done) == n_trials:
                    break
            if not running and run.p.returncode != 0:
                break
            time.sleep(0.2)
        assert run.p.wait(timeout=60) == 0, run.text
        assert seen_live, "the dashboard never listed a finished trial while the study was running"
        assert min(seen_live) < n_trials and seen_running
        assert len(set(seen_live)) >= 2, f"the dashboard never saw the study grow: {seen_live}"
        assert detail["name"] == "tiny" and detail["directions"] == ["maximize", "minimize"]
        assert detail["objective_names"] == ["val_accuracy", "train_time_s"]  # axes labelled by metric
        trials = detail["trials"]
        assert sorted(t["number"] for t in trials) == list(range(n_trials))
        for t in trials:
            ua = _attrs(t["user_attrs"])
            assert {"seed", "device", "precision", "settings", "history"} <= set(ua)
            assert ua["device"].startswith("cpu") and ua["precision"] in ("fp32", "bf16")
            if t["state"] == "Complete":
                assert float(ua["samples_per_s"]) > 0 and float(ua["val_accuracy"]) > 0
            else:
                assert ua["stop_reason"] in autotune.core.errors.STOP_REASONS
        study_attrs = _attrs(detail["user_attrs"])
        assert {"config", "versions", "device", "metrics"} <= set(study_attrs)
        assert '"optuna"' in study_attrs["versions"] and '"torch"' in study_attrs["versions"]
        # The page and its script are served too.
        page = requests.get(f"{base}/dashboard/studies/{ids[0]}", timeout=30)
        assert page.status_code == 200 and "<title>Optuna Dashboard</title>" in page.text
        assert requests.get(f"{base}/static/bundle.js", timeout=30).status_code == 200
        assert dash.p.poll() is None, dash.text
    finally:
        run.stop()
        dash.stop()
    for proc in (run, dash):
        assert "database is locked" not in proc.text
        assert "Traceback" not in proc.text, proc.text


def test_dashboard_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["dashboard"]) == 2
    assert capsys.readouterr().err.strip() == "error: autotune dashboard: FILE: give the YAML run file or --storage URL"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli.main(["dashboard", "--storage", f"sqlite:///{tmp_path / 'x.db'}", "--port", str(port)]) == 2
    assert re.fullmatch(rf"error: cannot listen on 127\.0\.0\.1:{port}: .+", capsys.readouterr().err.strip())


@pytest.mark.slow
def test_dashboard_screenshot(tmp_path: Path) -> None:
    from browser import run, screenshot

    url = f"sqlite:///{tmp_path / 'shot.db'}"
    cfg = autotune.load_config(str(TINY), {"study.storage": url, "study.n_trials": 8})
    autotune.run(cfg)
    dash, base = _start_dashboard(url)
    try:
        page = run(f"{base}/dashboard/studies/1", tmp_path, "--dump-dom", wait_ms=15000).stdout
        assert "Pareto Front" in page and 'class="main-svg"' in page  # the app drew its plots from the API
        screenshot(f"{base}/dashboard/studies/1", tmp_path / "dashboard.png", tmp_path, wait_ms=15000)
        # The trial list shows each trial's user attributes: what it ran with and what it measured.
        trials = run(f"{base}/dashboard/studies/1/trials", tmp_path, "--dump-dom", wait_ms=15000).stdout
        for attr in ("User Attributes", "device", "precision", "seed", "samples_per_s", "history"):
            assert attr in trials, attr
        screenshot(f"{base}/dashboard/studies/1/trials", tmp_path / "dashboard-trials.png", tmp_path, wait_ms=15000)
    finally:
        dash.stop()


def test_dashboard_off_loopback_warns_it_has_no_authentication(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.observe.dashboard import exposure_warning

    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert exposure_warning(host) is None, host
    for host in ("0.0.0.0", "::", "192.168.1.20", "my-server.example.org"):
        assert "no authentication" in str(exposure_warning(host)), host
    with socket.socket() as busy:  # the warning comes first, before the server even listens
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli.main(["dashboard", "--storage", f"sqlite:///{tmp_path / 'x.db'}", "--host", "0.0.0.0",
                         "--port", str(port)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("warning: the dashboard has no authentication: anyone who can reach 0.0.0.0")
    assert err[1].startswith("error: cannot listen on 0.0.0.0:")
