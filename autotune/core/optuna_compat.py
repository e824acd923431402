"""Every use autotune makes of Optuna's private names (`_something`), each behind one small named function,
constant or class here, so that an Optuna release that changes one breaks one place.

Tested on Optuna 5.0.0 (the lowest `pyproject.toml` allows: 4.x lacks public API autotune uses, e.g.
`Trial.set_constraint`) and 5.1.0 (the highest it allows: `<5.2`); the internals here are the same in 4.4.0.
tests/core_tests/test_optuna_compat.py checks every name below still exists and behaves as autotune relies on,
and names the Optuna internal and the function here when it does not.

Why each is private and not public Optuna API:
- `storage_of`, `study_id`: a Study has no public accessor of its storage or id (`Trial.storage` is public,
  and used where there is a trial);
- `trial_id`: neither has a Trial or a FrozenTrial (the id the storage API takes);
- `study_trials`, `StudyView`: Optuna's samplers read a study's trials through `Study._get_trials` (with the
  optimize loop's cache), so a view of the study shown to a sampler (search/credit.py, search/predicted.py) must
  answer it;
- `hypervolume`: Optuna's exact hypervolume in any number of dimensions has no public name;
- `cached_frozen_trial`: the copy `Trial.user_attrs` reads in this process (records.BufferedTrial keeps it fresh);
- `wrapped_storage`, `journal_file_path`: the RDBStorage inside Optuna's `_CachedStorage`, a journal's backend and
  its file (what identifies a storage: locks.storage_key; where records.py writes in one transaction);
- `heartbeat_enabled`, `stale_trial_ids`: `optuna.storages.fail_stale_trials` fails stale trials and queues the
  storage's retry but says neither which trials it failed nor lets orphans.reap fail them under its host lock
  with dead-owner trials in the same pass; these are the two calls it makes;
- `HookedRDBStorage`: `_CachedStorage.create_new_trial` calls the RDB's `_create_new_trial` directly, and
  `fail_stale_trials` its `_get_stale_trial_ids`: the only places to stamp a trial's owner in the write that
  creates it, and to give a heartbeat-stale trial its reason before whoever fails it;
- `trial_model`, `user_attr_model`, `find_trial_row`, `rdb_session`: the RDB schema and session factory, to write
  a trial's user attrs in one statement (records.py; Optuna writes one transaction per attr);
- `journal_append_user_attrs`: a journal's log writer, to append all of a trial's user attrs at once;
- `OPTIMIZE_LOGGER`, `optimize_log_filter`: the logger `Study.optimize` reports a failed trial on (with its
  traceback), filtered only while autotune's own optimize calls run.
Imports of Optuna's private modules happen inside the functions: a moved one breaks only the caller, whose
fallbacks (records.py: the public API, attr by attr) then apply.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Container, Iterator
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

OPTIMIZE_LOGGER = "optuna.study._optimize"  # optuna/study/_optimize.py: "Trial N failed ..." (with exc_info)


# ---------------------------------------------------------------- studies, trials, storages


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The study's storage (`Study._storage`: an RDBStorage comes wrapped in Optuna's `_CachedStorage`)."""
    return study._storage


def study_id(study: optuna.Study) -> int:
    """The study's id in its storage (`Study._study_id`)."""
    return study._study_id


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """The trial's id in its storage (`Trial._trial_id`, `FrozenTrial._trial_id`), not its number."""
    return trial._trial_id


def cached_frozen_trial(trial: optuna.Trial) -> FrozenTrial | None:
    """The FrozenTrial a running Trial reads its user attrs from in this process (`Trial._cached_frozen_trial`)."""
    return getattr(trial, "_cached_frozen_trial", None)


def wrapped_storage(storage: optuna.storages.BaseStorage) -> Any | None:
    """What the storage wraps (`_backend`): the RDBStorage inside a `_CachedStorage`, a JournalStorage's backend
    (its log file); None for anything else."""
    return getattr(storage, "_backend", None)


def journal_file_path(backend: Any) -> str | None:
    """The file of a journal file backend (`JournalFileBackend._file_path`); None for anything else."""
    return getattr(backend, "_file_path", None)


# ---------------------------------------------------------------- what a sampler reads


def study_trials(study: optuna.Study, *, deepcopy: bool = True, states: Container[TrialState] | None = None,
                 use_cache: bool = False) -> list[FrozenTrial]:
    """The study's trials as its samplers read them (`Study._get_trials`: `use_cache`, inside `Study.optimize`,
    reads the trials this process has cached instead of asking the storage again)."""
    return study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)


class StudyView:
    """A study as a sampler is shown it: every name is the study's, except its trials, which are `shown_trials`.

    Optuna's samplers read a study's trials through the private `Study._get_trials` (TPE, NSGA-II: with
    `use_cache=True`), so a stand-in must answer that as well as the public `get_trials` and `trials`. A subclass
    overrides `shown_trials` (default: the study's own)."""

    def __init__(self, study: optuna.Study) -> None:
        self.study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self.study, name)

    def shown_trials(self, deepcopy: bool, states: Container[TrialState] | None, use_cache: bool) -> list[FrozenTrial]:
        return study_trials(self.study, deepcopy=deepcopy, states=states, use_cache=use_cache)

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        return self.shown_trials(deepcopy, states, use_cache)

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self.shown_trials(deepcopy, states, False)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


def hypervolume(points: Any, reference: Any) -> float:
    """The hypervolume the points (rows, minimized; each inside the reference point) dominate up to `reference`,
    in any number of dimensions (`optuna._hypervolume.compute_hypervolume`: exact, WFG)."""
    from optuna._hypervolume import compute_hypervolume

    return float(compute_hypervolume(points, reference))


# ---------------------------------------------------------------- heartbeats and stale trials


def heartbeat_enabled(storage: optuna.storages.BaseStorage) -> bool:
    """Does the storage record heartbeats? What `Study.optimize` itself checks
    (`optuna.storages._heartbeat.is_heartbeat_enabled`)."""
    from optuna.storages._heartbeat import is_heartbeat_enabled

    return is_heartbeat_enabled(storage)


def stale_trial_ids(storage: optuna.storages.BaseStorage, study_id: int) -> list[int]:
    """Ids of the study's RUNNING trials whose heartbeat is older than the grace period (the storage's
    `_get_stale_trial_ids`, what `optuna.storages.fail_stale_trials` fails); the storage must have heartbeats."""
    return storage._get_stale_trial_ids(study_id)  # type: ignore[attr-defined]


class HookedRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDBStorage with two public hooks over its private methods: `new_trial_template` sees the template
    of every trial it creates (`_create_new_trial`: what `create_new_trial` and `_CachedStorage` call), and
    `stale_found` the ids of heartbeat-stale trials before anyone fails them (`_get_stale_trial_ids`: what
    `fail_stale_trials` and `stale_trial_ids` call)."""

    def new_trial_template(self, template_trial: FrozenTrial | None) -> FrozenTrial | None:
        return template_trial

    def stale_found(self, trial_ids: list[int]) -> None:
        pass

    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> FrozenTrial:
        return super()._create_new_trial(study_id, self.new_trial_template(template_trial))

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        ids = super()._get_stale_trial_ids(study_id)
        self.stale_found(ids)
        return ids


# ---------------------------------------------------------------- writing user attrs in one go


def trial_model() -> Any:
    """The ORM model of the `trials` table (`optuna.storages._rdb.models.TrialModel`)."""
    from optuna.storages._rdb import models

    return models.TrialModel


def user_attr_model() -> Any:
    """The ORM model of the `trial_user_attributes` table (`optuna.storages._rdb.models.TrialUserAttributeModel`:
    columns trial_id, key, value_json; unique on (trial_id, key))."""
    from optuna.storages._rdb import models

    return models.TrialUserAttributeModel


def find_trial_row(session: Any, trial_id: int) -> Any:
    """The trial's row in this session (`TrialModel.find_or_raise_by_id`: KeyError where there is none)."""
    return trial_model().find_or_raise_by_id(trial_id, session)


@contextlib.contextmanager
def rdb_session(storage: optuna.storages.RDBStorage) -> Iterator[Any]:
    """One session of the storage, committed at the end, an IntegrityError ignored as Optuna's own writes do
    (`optuna.storages._rdb.storage._create_scoped_session(storage.scoped_session, True)`)."""
    from optuna.storages._rdb.storage import _create_scoped_session

    with _create_scoped_session(storage.scoped_session, True) as session:
        yield session


def journal_append_user_attrs(storage: optuna.storages.JournalStorage, trial_id: int, attrs: dict[str, Any]) -> None:
    """Append one SET_TRIAL_USER_ATTR log per attr in one append (one file lock, one fsync), then replay the log
    as JournalStorage's own writes do (`_thread_lock`, `_replay_result.worker_id`, `_backend.append_logs`,
    `_sync_with_backend`, `optuna.storages.journal._storage.JournalOperation`)."""
    from optuna.storages.journal._storage import JournalOperation

    with storage._thread_lock:
        worker = storage._replay_result.worker_id
        storage._backend.append_logs([{"op_code": JournalOperation.SET_TRIAL_USER_ATTR, "worker_id": worker,
                                       "trial_id": trial_id, "user_attr": {k: v}} for k, v in attrs.items()])
        storage._sync_with_backend()


# ---------------------------------------------------------------- logging


@contextlib.contextmanager
def optimize_log_filter(*filters: logging.Filter) -> Iterator[None]:
    """Add `filters` to the logger `Study.optimize` reports failed trials on (OPTIMIZE_LOGGER) for the block, and
    remove them after it (a filter that was there already stays: an outer block added it)."""
    log = logging.getLogger(OPTIMIZE_LOGGER)
    added = [f for f in filters if f not in log.filters]
    for f in added:
        log.addFilter(f)
    try:
        yield
    finally:
        for f in added:
            log.removeFilter(f)


class _FailedTrialLines(logging.Filter):
    """Drops Optuna's lines about a failed trial (`Trial N failed...`)."""

    _FAILED = re.compile(r"^Trial \d+ failed\b")

    def filter(self, record: logging.LogRecord) -> bool:
        return not self._FAILED.match(record.getMessage())


def failed_trial_lines_off() -> contextlib.AbstractContextManager[None]:
    """For the block, Optuna logs no line about a failed trial: for a process whose own view (or driver) shows each
    trial's end with its error, once."""
    return optimize_log_filter(_FailedTrialLines())


__all__ = ["OPTIMIZE_LOGGER", "HookedRDBStorage", "StudyView", "cached_frozen_trial", "failed_trial_lines_off",
           "find_trial_row", "heartbeat_enabled", "hypervolume", "journal_append_user_attrs", "journal_file_path",
           "optimize_log_filter", "rdb_session", "stale_trial_ids", "storage_of", "study_id", "study_trials",
           "trial_id", "trial_model", "user_attr_model", "wrapped_storage"]
