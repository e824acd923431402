"""MLflow tracking (`pip install 'autotune[mlflow]'`): one parent run per study, one nested run per finished trial.

Written on MLflow's own client (`MlflowClient`), never its fluent global-state API, so a notebook's own
active run or two studies in one process do not collide. The parent run's id is a study user attr:
a resumed study, `--workers` and every `autotune worker` append to the same parent. A tracking server
that fails mid-study costs one warning, never a trial: unlogged trials wait in memory and are logged
when it answers again.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from autotune.core import ConfigError, environ, redact
from autotune.observe import export
from autotune.search import results
from autotune.spec import RunConfig, StudyRecord, TrialRecord
from autotune.study import write_study

PARENT_ATTR = "mlflow_run_id"  # the study user attr of the parent run's id (StudyRecord.mlflow_run_id)
URI_KEY = "tracking.mlflow.tracking_uri"
INSTALL = "pip install 'autotune[mlflow]'"
CHECK_TIMEOUT_S = 5  # validation: one request, no retries
LOG_TIMEOUT_S = 10  # mid-study: a dead server costs seconds per attempt, not MLflow's default minutes
LOG_RETRIES = 2
RETRY_S = 30.0  # after a failure, trials finishing within this long are queued without trying the server;
MAX_RETRY_S = 600.0  # the wait doubles with each failure in a row (a black-holed server costs ~40 s a try)
STATUS = {TrialState.COMPLETE: "FINISHED", TrialState.PRUNED: "KILLED", TrialState.FAIL: "FAILED"}
# A trial's record's fields that describe how it ran: tags (strings) on its run, not metrics.
TAG_ATTRS = ("stop_reason", "stop_epoch", "stop_detail", "error", "device", "precision", "worker", "batch_size_used")
# Its counts logged as final metrics beside the measured ones.
FINAL_FIELDS = ("epochs_run", "cpu_threads_capped", "cpu_threads_used")

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- checks before a study exists


def _mlflow(cfg: RunConfig) -> Any:
    """The MlflowClient class; MLflow missing is a ConfigError naming the pip command."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise ConfigError(cfg.file, "tracking.mlflow", f"MLflow is not installed: {INSTALL}") from None
    # A new SQLite store announces its table creation at INFO on every first run: not news to a user.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    return MlflowClient


def reason(exc: BaseException, uri: str) -> str:
    """The useful part of an MLflow/requests/SQLAlchemy error, one line, with no password in it."""
    text = str(exc).strip() or type(exc).__name__
    password = urlsplit(uri).password
    if password:
        text = text.replace(password, "***")
    errno = re.search(r"\[Errno -?\d+\] [^\"')\]\n]+", text)
    code = re.search(r"error code (\d{3})", text)
    if errno:
        out = errno.group(0).strip()
    elif "timed out" in text.lower() or "timeout" in text.lower():
        out = "timed out"
    elif code:
        out = f"HTTP {code.group(1)}"
        if code.group(1) in ("401", "403"):
            out += " (credentials: MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN)"
        elif code.group(1) == "404":
            out += " (is this an MLflow tracking server?)"
    else:
        out = text.splitlines()[0]
    return out[:300]


@contextlib.contextmanager
def _http(retries: int, timeout: int, force: bool) -> Iterator[None]:
    """MLflow reads its HTTP retry and timeout settings from the environment at each request; the
    defaults (7 retries with backoff, 120 s timeouts) stall a dead server's caller for minutes.
    `force`: the validation probe's values win over the user's own settings."""
    values = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(retries), "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout),
              "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}  # no "View run at" line per trial
    with environ.setenv({k: v for k, v in values.items() if force or os.environ.get(k) is None}):
        yield


def _local_path(uri: str) -> Path | None:
    """The file or folder a sqlite:/file:/plain-path URI writes to (None for servers and in-memory SQLite)."""
    if uri.split(":", 1)[0] in ("databricks", "databricks-uc", "uc"):  # names of remote stores, not paths
        return None
    if uri.startswith("sqlite:///"):
        rest = uri[len("sqlite:///"):]
        return Path(rest) if rest and rest != ":memory:" else None
    if uri.startswith("file:"):
        return Path(urlsplit(uri).path)
    if "://" not in uri and ":" not in uri.split("/")[0]:
        return Path(uri)
    return None


def _writable(path: Path) -> bool:
    """Could `path` be created or written here? Checked without creating anything."""
    if path.exists():
        return os.access(path, os.W_OK) and (path.is_file() or path.is_dir())
    probe = path.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK)


def check(cfg: RunConfig) -> None:
    """Can this config's tracking server be reached (or its local store be written)? Writes nothing."""
    ml = cfg.tracking.mlflow
    if ml is None:
        return
    file = cfg.file
    client_cls = _mlflow(cfg)
    uri = ml.tracking_uri
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ("file" if _local_path(uri) else "")
    if scheme in ("http", "https"):
        try:
            with _http(retries=0, timeout=CHECK_TIMEOUT_S, force=True):
                exp = client_cls(tracking_uri=uri).get_experiment_by_name(ml.experiment)
        except Exception as e:  # requests' and MLflow's errors alike: the server is not usable
            raise ConfigError(file, URI_KEY, f"cannot reach {redact(uri)}: {reason(e, uri)}") from None
        _check_experiment(cfg, exp)
        return
    path = _local_path(uri)
    if path is not None:
        if scheme == "file" and not _file_store_allowed():
            raise ConfigError(file, URI_KEY, f"MLflow refuses its file store ({uri}) unless MLFLOW_ALLOW_FILE_STORE "
                                             f"is true; use sqlite:///{path}/mlflow.db")
        if not _writable(path):
            raise ConfigError(file, URI_KEY, f"cannot write {path}: not a writable location")
        return
    if scheme.startswith(("postgresql", "mysql")):
        from sqlalchemy import create_engine, text

        try:
            engine = create_engine(uri, connect_args={"connect_timeout": CHECK_TIMEOUT_S})
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            engine.dispose()
        except Exception as e:  # driver errors differ
            raise ConfigError(file, URI_KEY, f"cannot reach {redact(uri)}: {reason(e, uri)}") from None
    # Anything else (databricks, ...): MLflow checks it when the tracker opens.


def _file_store_allowed() -> bool:
    try:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
    except ImportError:  # an MLflow from before the file store's maintenance mode
        return True
    return bool(MLFLOW_ALLOW_FILE_STORE.get())


def _check_experiment(cfg: RunConfig, exp: Any) -> None:
    ml = cfg.tracking.mlflow
    assert ml is not None
    if exp is not None and exp.lifecycle_stage != "active":
        raise ConfigError(cfg.file, "tracking.mlflow.experiment", f"experiment {ml.experiment!r} is deleted in "
                                                                    f"{redact(ml.tracking_uri)}: restore it (mlflow "
                                                                    f"experiments restore) or name another")


# ---------------------------------------------------------------- the tracker


def _ms(dt: Any) -> int:
    return int(dt.timestamp() * 1000) if dt is not None else int(time.time() * 1000)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class Tracker:
    """An Optuna trial callback: each finished trial becomes a nested run of the study's parent run. A
    `RunCallback` of the study layer: `start` (given `study` here, or called by the run once the study is open)
    opens the parent run, `finish` ends it."""

    def __init__(self, cfg: RunConfig, study: optuna.Study | None = None) -> None:
        ml = cfg.tracking.mlflow
        assert ml is not None
        self.cfg = cfg
        self.uri = ml.tracking_uri
        self.client = _mlflow(cfg)(tracking_uri=self.uri)
        self.metrics = [o.metric for o in cfg.objectives]
        self._pending: dict[int, FrozenTrial] = {}  # finished trials not yet logged, by number
        self._runs: dict[int, str] = {}  # trial number -> its nested run, once created (a retry reuses it)
        self._down = False
        self._retry_at = 0.0
        self._wait = RETRY_S
        if study is not None:
            self.start(study)

    def start(self, study: optuna.Study) -> None:
        """The experiment and the study's parent run (reopened or new); a new one first logs the trials the
        study already has."""
        cfg = self.cfg
        try:
            with self._http():
                self.experiment_id = self._experiment()
                self.parent, backlog = self._parent(study)
        except ConfigError:
            raise
        except Exception as e:  # the server went away since validation, or refuses us
            raise ConfigError(cfg.file, URI_KEY, f"cannot log to {redact(self.uri)}: {reason(e, self.uri)}") \
                from None
        for t in backlog:  # a new parent for a study that already has trials: log them first
            self._pending[t.number] = t
        self.flush()

    def _http(self) -> contextlib.AbstractContextManager[None]:
        return _http(retries=LOG_RETRIES, timeout=LOG_TIMEOUT_S, force=False)

    def _experiment(self) -> str:
        from mlflow.exceptions import MlflowException

        ml = self.cfg.tracking.mlflow
        assert ml is not None
        exp = self.client.get_experiment_by_name(ml.experiment)
        _check_experiment(self.cfg, exp)
        if exp is not None:
            return str(exp.experiment_id)
        location = None
        path = _local_path(self.uri)
        if self.uri.startswith("sqlite:") and path is not None:
            # MLflow's default artifact root is ./mlruns under the current folder: keep them beside the database.
            location = (path.resolve().parent / "mlartifacts").as_uri()
        try:
            return str(self.client.create_experiment(ml.experiment, artifact_location=location))
        except MlflowException:  # another worker created it a moment ago
            exp = self.client.get_experiment_by_name(ml.experiment)
            if exp is None:
                raise
            return str(exp.experiment_id)

    def _parent(self, study: optuna.Study) -> tuple[str, list[FrozenTrial]]:
        """The study's parent run (reopened), or a new one; with a new one, the finished trials to log."""
        from mlflow.exceptions import MlflowException

        rid = StudyRecord.of(study).mlflow_run_id
        if isinstance(rid, str):
            try:
                run = self.client.get_run(rid)
            except MlflowException as e:
                if e.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise
                run = None  # tracked elsewhere before (another server, a deleted database)
            if run is not None and run.info.lifecycle_stage == "active" and \
                    str(run.info.experiment_id) == self.experiment_id:
                if run.info.status != "RUNNING":
                    self.client.update_run(rid, status="RUNNING")
                return rid, []
        backlog = [t for t in study.get_trials(deepcopy=False) if t.state in STATUS and not TrialRecord.of(t).surplus]
        cfg = self.cfg
        tags = {"autotune.study": cfg.study.name, "autotune.storage": redact(cfg.study.storage),
                "autotune.objectives": ", ".join(f"{o.metric} ({o.direction})" for o in cfg.objectives),
                "autotune.sampler": cfg.study.sampler}
        tags.update({f"autotune.version.{k}": str(v) for k, v in (StudyRecord.of(study).versions or {}).items()})
        run = self.client.create_run(self.experiment_id, run_name=cfg.study.name, tags=tags)
        rid = run.info.run_id
        self.client.log_text(rid, yaml.safe_dump(self._redacted(cfg.to_dict()), sort_keys=False), "config.yaml")
        write_study(study, StudyRecord(mlflow_run_id=rid))
        return rid, backlog

    def _redacted(self, doc: dict[str, Any]) -> dict[str, Any]:
        """A config document fit for a shared server: no password of the storage or the tracking server."""
        doc = {**doc, "study": {**doc.get("study", {})}}
        if "storage" in doc["study"]:  # (`best --export` leaves out a storage that has a password)
            doc["study"]["storage"] = redact(str(doc["study"]["storage"]))
        ml = (doc.get("tracking") or {}).get("mlflow")
        if isinstance(ml, dict):
            doc["tracking"] = {**doc["tracking"], "mlflow": {**ml, "tracking_uri": redact(str(ml["tracking_uri"]))}}
        return doc

    # ------------------------------------------------------------ per trial

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """Optuna's trial callback (and `--workers`' driver loop): log one finished trial."""
        if trial.state not in STATUS or TrialRecord.of(trial).surplus:
            return
        self._pending[trial.number] = trial
        self.flush()

    def flush(self, force: bool = False) -> None:
        """Log the queued trials; a failure warns once per outage and keeps them queued."""
        if not self._pending or (not force and time.monotonic() < self._retry_at):
            return
        for number in sorted(self._pending):
            try:
                with self._http():
                    self._log_trial(self._pending[number])
            except Exception as e:  # never let the tracker fail a study
                self._wait = min(2 * self._wait, MAX_RETRY_S) if self._down else RETRY_S
                self._retry_at = time.monotonic() + self._wait
                if not self._down:
                    log.warning(f"warning: MLflow tracking at {redact(self.uri)} failed ({reason(e, self.uri)}); "
                                "the study goes on and logs the trials it misses when the server answers again")
                self._down = True
                return
            del self._pending[number]
        if self._down:
            self._down = False
            log.warning(f"note: MLflow tracking at {redact(self.uri)} answers again; the trials it missed are logged")

    def _log_trial(self, t: FrozenTrial) -> None:
        from mlflow.entities import Metric, Param

        r = TrialRecord.of(t)
        rid = self._runs.get(t.number)
        if rid is None:
            tags = {"mlflow.parentRunId": self.parent, "autotune.study": self.cfg.study.name,
                    "trial_number": str(t.number), "state": t.state.name}
            tags.update({k: str(v)[:5000] for k in TAG_ATTRS if (v := getattr(r, k)) is not None})
            run = self.client.create_run(self.experiment_id, start_time=_ms(t.datetime_start), tags=tags,
                                         run_name=f"trial-{t.number}")
            rid = self._runs[t.number] = run.info.run_id
        params = {**(r.settings or {}), **t.params}
        if r.seed is not None:
            params["seed"] = r.seed
        when = _ms(t.datetime_complete)
        metrics = [Metric(key, float(v), when, int(rec["epoch"]))
                   for rec in r.history or [] if _number(rec.get("epoch"))
                   for key, v in rec.items() if key != "epoch" and _number(v)]
        final = {k: float(v) for k, v in r.metrics.items() if _number(v)}
        final.update({k: float(v) for k in FINAL_FIELDS if _number(v := getattr(r, k))})
        if t.values is not None:
            final.update({m: float(v) for m, v in zip(self.metrics, t.values)})
        metrics += [Metric(f"final/{k}", v, when, 0) for k, v in final.items() if math.isfinite(v)]
        self.client.log_batch(rid, metrics=metrics, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
        self.client.set_terminated(rid, STATUS[t.state], end_time=_ms(t.datetime_complete))
        del self._runs[t.number]

    # ------------------------------------------------------------ end of a run

    def finish(self, study: optuna.Study, status: str | None = "FINISHED") -> None:
        """Log what is still queued, the recommended trial's YAML (best.yaml) and, with `status`, end the parent."""
        self.flush(force=True)
        if self._pending:
            log.warning(f"warning: {len(self._pending)} trial(s) were not logged to MLflow at {redact(self.uri)} "
                        f"(trials {', '.join(map(str, sorted(self._pending)))}): it did not answer; they are kept in "
                        "the study")
        try:
            with self._http():
                best = results.best_trial(study, self.cfg)
                if best is not None:
                    summary = results.summarize(best, self.metrics)
                    doc = self._redacted(export.best_yaml(self.cfg, summary))
                    self.client.log_text(self.parent, export.render(self.cfg, summary, doc), "best.yaml")
                    self.client.set_tag(self.parent, "autotune.best_trial", str(best.number))
                if status is not None:
                    self.client.set_terminated(self.parent, status)
        except Exception as e:
            log.warning(f"warning: MLflow tracking at {redact(self.uri)} failed at the end of the run "
                        f"({reason(e, self.uri)}); best.yaml was not logged")


def describe(study: optuna.Study, cfg: RunConfig) -> str:
    """Where the study's MLflow runs are, for the end of `autotune run` ('' without tracking)."""
    ml = cfg.tracking.mlflow
    rid = StudyRecord.of(study).mlflow_run_id
    if ml is None or not isinstance(rid, str):
        return ""
    see = f"; see them with: mlflow ui --backend-store-uri {ml.tracking_uri}" if ml.tracking_uri.startswith(
        "sqlite:") else ""
    return f"MLflow: experiment {ml.experiment!r} at {redact(ml.tracking_uri)}, parent run {rid}{see}"


def callbacks(cfg: RunConfig) -> list[Tracker]:
    """The run's tracking callbacks for `study.run(callbacks=...)`, `run_worker` or `run_parallel`: [the MLflow
    tracker], checked here (server reachable, store writable: a ConfigError before any study exists), or [] when
    the config has no `tracking.mlflow` section. The tracker opens its parent run when the study is open."""
    if cfg.tracking.mlflow is None:
        return []
    check(cfg)
    return [Tracker(cfg)]
