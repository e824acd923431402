"""A trial's record (spec/stored.py's `TrialRecord`: every user attr autotune stores is one of its fields) at
plain-Optuna cost: filled in memory while the trial runs (`planned`, `trained` and the objective's stages) and
written to the storage once, when it ends, in the same transaction that records its end. This module and
`TrialRecord.of` are the only writer and reader of a trial's user attrs.

Optuna writes every `set_user_attr` as its own storage transaction (on SQLite: a commit and an fsync).
autotune records about twenty per trial (settings, seed, device, the per-epoch `history` and
`epoch_values`, final metrics, the stop reason), which made its bookkeeping cost several times a plain
ask/tell. Almost nothing reads a running trial's attrs: `vs_front` reads finished trials, the report, the
dashboard's tables and MLflow tracking read them once the trial ends; only pareto_asha's rung tables hold other
workers' running trials, so a trial that passes a rung while others run stores its curve so far (`publish`, one
transaction at a rung epoch; one worker alone never does). So `BufferedTrial`
holds the trial's record, and `flush` (the objective's `finally`) hands it over at once:
- on an RDB storage `attach`ed by `storage.make_storage` (SQLite, PostgreSQL, MySQL), they are staged and
  written inside the transaction of Optuna's own `tell` (the one that sets the trial's final state), so
  they cost no transaction of their own: a SQLAlchemy `before_flush` hook on the storage's sessions adds
  them when that transaction flushes a finished state for the trial;
- on a journal file, one append (one lock, one fsync) of all of them;
- anywhere else, through the public API, attr by attr.

This reaches into Optuna's storage internals (the RDB models and session factory, the journal's log
writer: core/optuna_compat.py); where those are not what this code expects, it writes attr by attr through
the public API.
"""

from __future__ import annotations

import json
import math
import sqlite3
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import optuna

from autotune.core import optuna_compat as compat
from autotune.spec import StudyRecord, TrialRecord
from autotune.training import EpochRecord, Shaped

if TYPE_CHECKING:
    from autotune.fit import TrialPlan
    from autotune.training import TrainResult

    _TrialLike = optuna.Trial  # a checker sees BufferedTrial as the trial it forwards to (__getattr__)
else:
    _TrialLike = object


class BufferedTrial(_TrialLike):
    """The `optuna.Trial` an objective sees, with its `record` kept in memory until `flush`; every other attribute
    and method is the trial's own (suggest, report, should_prune, set_constraint, study, number).

    Its epochs stay `EpochRecord`s (`epochs`, the last attempt's, as the context measured them; the study's stop
    rules read them so) until the record is written: then they become its stored `history` and `epoch_values`
    (the values of `epoch_metrics`, the objectives known every epoch)."""

    def __init__(self, trial: optuna.Trial, epoch_metrics: Sequence[str] = ()) -> None:
        self._trial = trial
        self.record = TrialRecord()  # what this trial stores beyond what it held when it started
        self.epochs: list[EpochRecord] = []
        self.epoch_metrics = tuple(epoch_metrics)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trial, name)

    @property
    def trial(self) -> optuna.Trial:
        """The Optuna trial itself, for what takes one (the search, the speed probe, the pruners)."""
        return self._trial

    def attrs(self) -> dict[str, Any]:
        """The user attrs the record stores, its epochs flattened into them here (`EpochRecord.as_dict`)."""
        if self.epochs:
            self.record.history = [rec.as_dict() for rec in self.epochs]
            self.record.epoch_values = epoch_values(self.epochs, self.epoch_metrics)
        return self.record.attrs()

    def flush(self) -> None:
        """Hand the record over: staged for the trial's final transaction where the storage takes that (`attach`),
        else written now in one storage transaction."""
        attrs = self.attrs()
        if not attrs:
            return
        trial = self._trial
        if not stage(trial.storage, compat.trial_id(trial), attrs):
            write_user_attrs(trial.storage, compat.trial_id(trial), attrs)
        cached = compat.cached_frozen_trial(trial)  # what trial.user_attrs returns in this process
        if cached is not None:
            cached.user_attrs.update(attrs)

    def end_now(self, state: optuna.trial.TrialState) -> None:
        """Write the record and the trial's final `state` straight to the storage: for the watchdog's thread when
        the objective cannot return (its process ends next)."""
        trial_id = compat.trial_id(self._trial)
        write_user_attrs(self._trial.storage, trial_id, self.attrs())
        self._trial.storage.set_trial_state_values(trial_id, state)


def epoch_values(epochs: Sequence[EpochRecord], metrics: Sequence[str]) -> list[list[float]]:
    """Per epoch, the values of `metrics` known then (NaN: not reported): a trial's stored `epoch_values`, and the
    curve Pareto pruning judges."""
    return [[math.nan if (v := rec.value(m)) is None else v for m in metrics] for rec in epochs]


def planned(record: TrialRecord, plan: TrialPlan) -> None:
    """What a trial stores before it trains: its seed, its settings (the point sampled), device and precision."""
    record.seed = plan.seed
    record.settings = dict(plan.point)
    record.device = plan.device_name
    record.precision = plan.settings.precision


def trained(record: TrialRecord, plan: TrialPlan, result: TrainResult) -> None:
    """What a trained trial stores: its final metrics and epochs; what shaped it (`shaped`); an early stop; its
    meters."""
    record.metrics.update(result.metrics())
    record.epochs_run = result.epochs_run
    shaped(record, plan, Shaped(not_applied=result.not_applied, unused=result.unused, recipe=result.recipe,
                                effective_lrs=result.effective_lrs))
    if result.stopped_early_at is not None:  # a finished trial: values are its last epoch's
        record.stopped("early_stopped", result.stopped_early_at)
    record.meters = result.meters  # what measured peak_memory_mb and energy_j, or why not


def shaped(record: TrialRecord, plan: TrialPlan, what: Shaped | None) -> None:
    """What shaped a trial, trained, stopped or failed alike: its searched settings that did not are `not_applied`,
    and its settings are stored without any that did not (a default optimizer adam nothing stepped, the catalogue's
    epochs 10 where the Trainer trained its own 2); the values the user's recipe held for those (`recipe`); the rates
    a chosen lr gave the fit's own optimizer's groups. None (it stopped before training began): the plan stays."""
    if what is None:
        return
    # (set, not merged: an out-of-memory retry's attempt replaces the first one's)
    record.settings = {k: v for k, v in plan.point.items() if k not in what.unused}
    record.not_applied = dict(what.not_applied) or None
    record.recipe = dict(what.recipe) or None  # settings left to the user's code or the framework's defaults
    record.own_group_lrs, record.effective_lrs = what.effective_lrs if what.effective_lrs is not None else (None, None)


def publish(trial: optuna.Trial, record: TrialRecord) -> None:
    """Write `record`'s attrs now, for a trial still running, in one storage transaction: its curve so far at a
    pruner's rung, which the other workers' pruners read (epoch_rules.py); the final record rewrites them."""
    write_user_attrs(trial.storage, compat.trial_id(trial), record.attrs())


def write(trial: optuna.Trial, record: TrialRecord) -> None:
    """Store `record` for a trial that is not the objective's (a surplus one: budget.py), as the objective's is."""
    buffered = BufferedTrial(trial)
    buffered.record = record
    buffered.flush()


def write_study(study: optuna.Study, record: StudyRecord) -> None:
    """Store a study record's fields that are set into `study`, attr by attr (the layers below, which cannot import
    this module, are handed this function: speed's probe records and plan)."""
    for key, value in record.attrs().items():
        study.set_user_attr(key, value)


def put(storage: optuna.storages.BaseStorage, trial_id: int, record: TrialRecord) -> None:
    """Write a record's attrs through the storage's public API, one by one: from inside a storage's own hooks
    (orphans.py stamps a trial's owner as it takes it, and a dead worker's trial's reason before it is failed)."""
    for key, value in record.attrs().items():
        storage.set_trial_user_attr(trial_id, key, value)


# storage -> {trial_id: user attrs waiting for the trial's final transaction}
_STAGED: weakref.WeakKeyDictionary[Any, dict[int, dict[str, Any]]] = weakref.WeakKeyDictionary()


def _relational(storage: optuna.storages.BaseStorage) -> optuna.storages.RDBStorage | None:
    backend = compat.wrapped_storage(storage)  # RDBStorage sits inside Optuna's _CachedStorage
    if isinstance(backend, optuna.storages.RDBStorage):
        return backend
    return storage if isinstance(storage, optuna.storages.RDBStorage) else None


def attach(storage: optuna.storages.BaseStorage) -> None:
    """Let this RDB storage take staged user attrs into the transaction that finishes their trial."""
    rdb = _relational(storage)
    if rdb is None or rdb in _STAGED or not _upserts(rdb):
        return
    try:
        trial_model = compat.trial_model()
        from sqlalchemy import event
    except ImportError:
        return
    staged: dict[int, dict[str, Any]] = {}
    dialect = rdb.engine.name  # (the hook holds no reference to the storage)

    def before_flush(session: Any, flush_context: Any, instances: Any) -> None:
        if not staged:
            return
        for obj in list(session.dirty):
            if isinstance(obj, trial_model) and obj.trial_id in staged and \
                    optuna.trial.TrialState(obj.state).is_finished():
                _upsert(session, dialect, obj.trial_id, staged.pop(obj.trial_id))

    event.listen(rdb.scoped_session, "before_flush", before_flush)
    _STAGED[rdb] = staged


def stage(storage: optuna.storages.BaseStorage, trial_id: int, attrs: dict[str, Any]) -> bool:
    """Keep `attrs` for the transaction that gives the trial its final state (False: not an attached storage)."""
    rdb = _relational(storage)
    staged = _STAGED.get(rdb) if rdb is not None else None
    if staged is None:
        return False
    staged.setdefault(trial_id, {}).update(attrs)
    return True


def write_user_attrs(storage: optuna.storages.BaseStorage, trial_id: int, attrs: dict[str, Any]) -> None:
    """Set several user attrs of a trial in one storage transaction (per attr where the storage has no batch)."""
    if not attrs:
        return
    rdb = _relational(storage)
    try:
        if rdb is not None:
            _write_rows(rdb, trial_id, attrs)
            return
        if isinstance(storage, optuna.storages.JournalStorage):
            compat.journal_append_user_attrs(storage, trial_id, attrs)  # one append (one lock, one fsync)
            return
    except (AttributeError, ImportError, TypeError):  # Optuna's internals moved: the public path below
        pass
    for key, value in attrs.items():
        storage.set_trial_user_attr(trial_id, key, value)


def _write_rows(storage: optuna.storages.RDBStorage, trial_id: int, attrs: dict[str, Any]) -> None:
    """One session: the trial checked once (still running), then one multi-row upsert (per row on MySQL)."""
    with compat.rdb_session(storage) as session:
        trial = compat.find_trial_row(session, trial_id)
        storage.check_trial_is_updatable(trial_id, trial.state)
        _upsert(session, storage.engine.name, trial_id, attrs)


def _upsert(session: Any, dialect: str, trial_id: int, attrs: dict[str, Any]) -> None:
    """Insert or replace the attrs in the session's transaction: one multi-row statement on MySQL; elsewhere one
    executemany of one cached Core statement (one round trip on psycopg and SQLite; an ORM multi-row VALUES was
    compiled afresh for every trial, 2-3 ms of CPU on PostgreSQL)."""
    model = compat.user_attr_model()
    rows = [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)} for k, v in attrs.items()]
    if dialect == "mysql":
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        ins = mysql_insert(model).values(rows)
        session.execute(ins.on_duplicate_key_update(value_json=ins.inserted.value_json))
        return
    session.execute(_upsert_statement(dialect), rows)


_UPSERTS: dict[str, Any] = {}  # dialect -> the Core upsert of one trial user attr (built once: SQLAlchemy caches it)


def _upsert_statement(dialect: str) -> Any:
    if dialect not in _UPSERTS:
        if dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert  # type: ignore[assignment]
        table = compat.user_attr_model().__table__
        stmt = insert(table)
        _UPSERTS[dialect] = stmt.on_conflict_do_update(index_elements=[table.c.trial_id, table.c.key],
                                                       set_={"value_json": stmt.excluded.value_json})
    return _UPSERTS[dialect]


def _upserts(storage: optuna.storages.RDBStorage) -> bool:
    """Can `_upsert` write to this database (SQLite 3.24+, PostgreSQL, MySQL)?"""
    name = storage.engine.name
    return name in ("postgresql", "mysql") or (name == "sqlite" and sqlite3.sqlite_version_info >= (3, 24, 0))


__all__ = ["BufferedTrial", "attach", "epoch_values", "planned", "publish", "put", "shaped", "stage", "trained",
           "write", "write_study", "write_user_attrs"]
