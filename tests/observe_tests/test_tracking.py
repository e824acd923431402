"""MLflow tracking: a real SQLite-backed MLflow store in tmp_path, read back through MlflowClient.

Studies train the tiny digits CNN for real; the failure test feeds the tracker hand-made finished
trials (optuna.trial.create_trial), so a server outage can be staged without training.
"""

from __future__ import annotations

import http.server
import logging
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

import autotune
from autotune import config
from autotune.cli import app as cli
from autotune.core.errors import ConfigError
from autotune.observe import tracking
from autotune.study import runner as study_mod
from autotune.study import workers
from autotune.study.budget import is_surplus
from autotune.study.storage import make_storage
from tests.support import tiny

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # SQLAlchemy 2.1 on MLflow's store code

SPACE = {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}}


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow SQLite store with its tables made once: creating them costs 2-8 s a store."""
    path = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture(autouse=True)
def store(tmp_path: Path, empty_store: Path) -> Path:
    """Each test's own MLflow store, tmp_path/mlflow.db, as a copy of the empty one."""
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    return tmp_path / "mlflow.db"


def tracked(tmp_path: Path, **sections: Any) -> config.RunConfig:
    return tiny(tmp_path, space=SPACE, tracking={"mlflow": {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db",
                                                            "experiment": "exp"}}, **sections)


def runs(tmp_path: Path) -> tuple[Any, list[Any], MlflowClient]:
    """(parent run, nested runs by trial number, client) of the test experiment."""
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("exp")
    found = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in found if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, [r.info.run_name for r in parents]
    children = sorted((r for r in found if "mlflow.parentRunId" in r.data.tags),
                      key=lambda r: int(r.data.tags["trial_number"]))
    assert {r.data.tags["mlflow.parentRunId"] for r in children} <= {parents[0].info.run_id}
    return parents[0], children, client


def listing(client: MlflowClient, parent: Any, children: list[Any]) -> str:
    """The runs as a table (printed by the tests: `pytest tests/observe_tests/test_tracking.py -s`)."""
    rows = [f"{'run':<10} {'parent':<10} {'status':<9} {'val_accuracy steps':<19} {'final/val_accuracy':>18}  params"]
    for r in [parent, *children]:
        hist = client.get_metric_history(r.info.run_id, "val_accuracy")
        final = r.data.metrics.get("final/val_accuracy")
        rows.append(f"{r.info.run_name:<10} {r.data.tags.get('mlflow.parentRunId', '-')[:8]:<10} {r.info.status:<9} "
                    f"{','.join(str(m.step) for m in sorted(hist, key=lambda m: m.step)) or '-':<19} "
                    f"{'-' if final is None else f'{final:.4f}':>18}  {len(r.data.params)}")
    return "\n".join(rows)


def steps(client: MlflowClient, run: Any, key: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run.info.run_id, key))


def test_study_logs_a_parent_and_a_nested_run_per_trial_and_a_resume_appends(tmp_path: Path, capsys: Any) -> None:
    cfg = tracked(tmp_path)
    study = autotune.run(cfg).study  # the facade passes the tracker to the study as a callback
    parent, children, client = runs(tmp_path)
    trials = sorted(study.get_trials(), key=lambda t: t.number)
    assert study.user_attrs[tracking.PARENT_ATTR] == parent.info.run_id
    assert [r.info.run_name for r in children] == ["trial-0", "trial-1", "trial-2"]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["autotune.study"] == "t" and parent.data.tags["autotune.storage"] == cfg.study.storage
    for t, r in zip(trials, children):
        assert r.data.tags["state"] == t.state.name == "COMPLETE" and r.info.status == "FINISHED"
        assert r.data.tags["device"] == t.user_attrs["device"] and r.data.tags["precision"] == "fp32"
        assert r.data.params["lr"] == str(t.params["lr"]) and r.data.params["seed"] == str(t.user_attrs["seed"])
        # per-epoch metrics, step = epoch, from the trial's history; final values beside them
        assert steps(client, r, "val_accuracy") == steps(client, r, "train_loss") == [1, 2]
        history = {m.step: m.value for m in client.get_metric_history(r.info.run_id, "val_accuracy")}
        assert history == {h["epoch"]: pytest.approx(h["val_accuracy"]) for h in t.user_attrs["history"]}
        assert r.data.metrics["final/val_accuracy"] == pytest.approx(t.values[0])
        assert r.data.metrics["final/train_time_s"] == pytest.approx(t.values[1])
        assert r.data.metrics["final/samples_per_s"] == pytest.approx(t.user_attrs["samples_per_s"])

    # the recommended trial's YAML is an artifact of the parent, and a valid autotune config
    best = tmp_path / "from-mlflow"
    client.download_artifacts(parent.info.run_id, "best.yaml", str(best))
    best_cfg = config.load(best / "best.yaml")
    best_trial = trials[int(parent.data.tags["autotune.best_trial"])]
    assert best_cfg.space == {} and best_cfg.train["lr"] == pytest.approx(best_trial.params["lr"])
    assert best_cfg.study.name == "t-best" and best_cfg.tracking.mlflow is not None
    assert cli.main(["validate", str(best / "best.yaml")]) == 0  # its tracking server checked too

    # resume from the command line with a larger budget: the same parent gains the new trial
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    capsys.readouterr()
    assert cli.main(["run", str(tmp_path / "tiny.yaml"), "--plain", "--n-trials", "4"]) == 0
    out = capsys.readouterr().out
    assert f"MLflow: experiment 'exp' at sqlite:///{tmp_path}/mlflow.db, parent run {parent.info.run_id}" in out
    parent2, children2, _ = runs(tmp_path)
    assert parent2.info.run_id == parent.info.run_id and parent2.info.status == "FINISHED"
    assert [r.data.tags["trial_number"] for r in children2] == ["0", "1", "2", "3"]
    assert [r.info.run_id for r in children2[:3]] == [r.info.run_id for r in children]
    print(f"\nparent run {parent.info.run_id} (artifacts: best.yaml, config.yaml)\n" +
          listing(client, parent2, children2))


@pytest.mark.slow
def test_workers_driver_and_a_joining_worker_log_each_trial_once(tmp_path: Path) -> None:
    """`--workers 2`: the driver logs what its workers finish; `autotune worker` logs its own trials."""
    cfg = tracked(tmp_path, study={"storage": f"journal:///{tmp_path}/w.log", "n_trials": 2},
                  train={"epochs": 2, "device": "cpu"})
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    assert cli.main(["run", str(tmp_path / "w.yaml"), "--workers", "2", "--plain"]) == 0
    study = optuna.load_study(study_name=cfg.study.name, storage=make_storage(cfg))
    parent, children, client = runs(tmp_path)
    assert len(children) == 2 and parent.info.status == "FINISHED"
    ran_by = {str(t.number): t.user_attrs[workers.WORKER_ATTR] for t in study.get_trials()}
    assert all(r.data.tags["worker"] == ran_by[r.data.tags["trial_number"]] for r in children)
    assert all(steps(client, r, "val_accuracy") == [1, 2] for r in children)

    assert cli.main(["worker", "--storage", cfg.study.storage, "--study", cfg.study.name, "--n-trials", "3"]) == 0
    parent2, children2, _ = runs(tmp_path)
    assert parent2.info.run_id == parent.info.run_id
    numbers = sorted(int(r.data.tags["trial_number"]) for r in children2)
    finished = sorted(t.number for t in study.get_trials() if t.state in study_mod.FINISHED and not is_surplus(t))
    assert numbers == finished and len(numbers) == 3


def synthetic(study: optuna.Study, epochs: int = 3, pruned: bool = False) -> optuna.trial.FrozenTrial:
    """A finished trial as the objective leaves it (params, values, per-epoch history), added to the study;
    `pruned`: stopped as diverged after `epochs` epochs, with no final values."""
    n = len(study.trials)
    history = [{"epoch": e, "val_accuracy": 0.5 + 0.1 * e, "train_loss": 1.0 / e} for e in range(1, epochs + 1)]
    final = {"val_accuracy": history[-1]["val_accuracy"], "train_time_s": 1.0 + n}
    stop = {"stop_reason": "diverged", "stop_epoch": epochs}
    study.add_trial(optuna.trial.create_trial(
        params={"lr": 0.01 * (n + 1)}, distributions={"lr": FloatDistribution(1e-3, 1.0, log=True)},
        state=TrialState.PRUNED if pruned else TrialState.COMPLETE, values=None if pruned else list(final.values()),
        user_attrs={"history": history, "seed": n, "device": "cpu", "precision": "fp32",
                    **(stop if pruned else final)}))
    return study.trials[-1]


def test_a_failing_server_warns_once_keeps_going_and_logs_the_missed_trials_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    cfg = tracked(tmp_path)
    study = optuna.create_study(directions=cfg.directions)
    tracker = tracking.Tracker(cfg, study)
    tracker(study, synthetic(study))

    down = {"on": True}
    real_log_batch = tracker.client.log_batch

    def log_batch(*args: Any, **kwargs: Any) -> None:
        if down["on"]:
            raise ConnectionError("[Errno 111] Connection refused")
        real_log_batch(*args, **kwargs)

    monkeypatch.setattr(tracker.client, "log_batch", log_batch)
    monkeypatch.setattr(tracking, "RETRY_S", 0.0)  # try the server at every trial
    with caplog.at_level(logging.WARNING, logger="autotune.observe.tracking"):
        tracker(study, synthetic(study))
        tracker(study, synthetic(study))
        warnings = [r.getMessage() for r in caplog.records]
        assert len(warnings) == 1 and "failed ([Errno 111] Connection refused)" in warnings[0]
        down["on"] = False
        tracker(study, synthetic(study))
        assert "answers again" in caplog.records[-1].getMessage()
    _, children, client = runs(tmp_path)
    # each trial once (the run created before the failure is reused), with all its metrics
    assert [r.data.tags["trial_number"] for r in children] == ["0", "1", "2", "3"]
    assert all(steps(client, r, "val_accuracy") == [1, 2, 3] for r in children)
    assert all(r.info.status == "FINISHED" for r in children)


def test_a_new_parent_logs_the_trials_a_study_already_has(tmp_path: Path) -> None:
    """Tracking added to a study that already ran: its finished trials land under the new parent."""
    cfg = tracked(tmp_path, study={"storage": "postgresql://alice:s3cret@db.example/studies"})
    study = optuna.create_study(directions=cfg.directions)  # the storage above is only named, never reached
    for _ in range(2):
        synthetic(study)
    synthetic(study, epochs=2, pruned=True)
    tracker = tracking.Tracker(cfg, study)
    tracker.finish(study)
    parent, children, client = runs(tmp_path)
    assert len(children) == 3
    pruned = children[2]
    assert pruned.info.status == "KILLED" and pruned.data.tags["state"] == "PRUNED"
    assert pruned.data.tags["stop_reason"] == "diverged" and pruned.data.tags["stop_epoch"] == "2"
    assert steps(client, pruned, "val_accuracy") == [1, 2] and "final/val_accuracy" not in pruned.data.metrics
    assert parent.data.tags["autotune.storage"] == "postgresql://alice:***@db.example/studies"
    saved = tmp_path / "artifacts"
    for name in ("config.yaml", "best.yaml"):
        client.download_artifacts(parent.info.run_id, name, str(saved))
        text = (saved / name).read_text()
        assert "s3cret" not in text and "alice:***@db.example" in text


def test_unreachable_tracking_server_is_one_line_with_exit_2(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"study": {"storage": f"sqlite:///{tmp_path}/s.db"},
                                    "tracking": {"mlflow": {"tracking_uri": "http://alice:s3cret@127.0.0.1:1"}}}))
    t0 = time.perf_counter()
    assert cli.main(["validate", str(path)]) == 2
    assert time.perf_counter() - t0 < 30  # one request, no minutes of retries
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "s3cret" not in err
    assert re.fullmatch(r"error: bad\.yaml: tracking\.mlflow\.tracking_uri: cannot reach "
                        r"http://alice:\*\*\*@127\.0\.0\.1:1: .*refused\n", err), err
    assert not (tmp_path / "s.db").exists()
    # and `autotune run` stops before the study exists
    assert cli.main(["run", str(path), "--plain"]) == 2
    assert not (tmp_path / "s.db").exists()


@pytest.fixture
def not_mlflow_server() -> Iterator[str]:
    """A real HTTP server on this machine that is not MLflow: every path is a 404."""

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_error(404)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_server_that_is_not_mlflow_is_named(tmp_path: Path, not_mlflow_server: str) -> None:
    cfg = tiny(tmp_path, tracking={"mlflow": {"tracking_uri": not_mlflow_server}})
    with pytest.raises(ConfigError, match=r"tracking\.mlflow\.tracking_uri: cannot reach http://127\.0\.0\.1:\d+: "
                                          r"HTTP 404 \(is this an MLflow tracking server\?\)"):
        tracking.check(cfg)


def test_defaults_missing_mlflow_and_local_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    ml = tiny(tmp_path, tracking={"mlflow": {}}).tracking.mlflow
    assert ml is not None and ml.tracking_uri == "sqlite:///studies/mlflow.db" and ml.experiment == "t"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert tiny(tmp_path, tracking={"mlflow": {}}).tracking.mlflow.tracking_uri == "http://mlflow.example:5000"
    assert tiny(tmp_path).tracking.mlflow is None

    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)  # as if MLflow were not installed
    with pytest.raises(ConfigError, match=r"tracking\.mlflow: MLflow is not installed: pip install "
                                          r"'autotune\[mlflow\]'"):
        tracking.check(tiny(tmp_path, tracking={"mlflow": {"tracking_uri": f"sqlite:///{tmp_path}/m.db"}}))
    monkeypatch.undo()

    tracking.check(tiny(tmp_path, tracking={"mlflow": {"tracking_uri": f"sqlite:///{tmp_path}/new/dir/m.db"}}))
    assert not (tmp_path / "new").exists()  # checked, not created
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"tracking_uri: cannot write .*/file/m\.db: not a writable location"):
        tracking.check(tiny(tmp_path, tracking={"mlflow": {"tracking_uri": f"sqlite:///{tmp_path}/file/m.db"}}))
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ConfigError, match=r"tracking_uri: MLflow refuses its file store .* use sqlite:///"):
        tracking.check(tiny(tmp_path, tracking={"mlflow": {"tracking_uri": f"file://{tmp_path}/mlruns"}}))


def test_redact() -> None:
    assert tracking.redact("https://bob:pw@mlflow.example/x") == "https://bob:***@mlflow.example/x"
    assert tracking.redact("http://mlflow.example:5000") == "http://mlflow.example:5000"
    assert tracking.redact("sqlite:////tmp/m.db") == "sqlite:////tmp/m.db"
    assert tracking.reason(RuntimeError("failed for http://bob:pw@h with error code 401 != 200"),
                           "http://bob:pw@h").startswith("HTTP 401 (credentials")
