"""Each Optuna internal autotune relies on (core/optuna_compat.py) still exists and behaves as used; a failure
names the internal and the compat function to adapt. Also: the scoped log filters, and the version cap."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from autotune.core import optuna_compat as compat

ROOT = Path(__file__).resolve().parents[2]
HEARTBEAT_WARNING = "ignore:Heartbeat of storage is supposed to be used with Study.optimize"


@contextlib.contextmanager
def relied_on(internal: str, function: str) -> Iterator[None]:
    """Turn any failure inside into one message naming the Optuna internal and the compat function."""
    try:
        yield
    except Exception as e:  # an AssertionError too: the internal exists but behaves differently
        pytest.fail(f"Optuna {optuna.__version__} changed {internal}, which autotune.core.optuna_compat.{function} "
                    f"relies on ({type(e).__name__}: {e}): adapt {function}, or keep optuna below this release in "
                    "pyproject.toml", pytrace=False)


def sqlite_study(tmp_path: Path, **storage_kw: Any) -> optuna.Study:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/c.db", **storage_kw)
    return optuna.create_study(storage=storage, study_name="c")


def journal_study(tmp_path: Path) -> optuna.Study:
    backend = optuna.storages.journal.JournalFileBackend(str(tmp_path / "c.log"))
    return optuna.create_study(storage=optuna.storages.JournalStorage(backend), study_name="c")


# ---------------------------------------------------------------- studies, trials, storages


def test_storage_of_is_the_storage_the_study_and_its_trials_use(tmp_path: Path) -> None:
    study = sqlite_study(tmp_path)
    with relied_on("Study._storage", "storage_of"):
        storage = compat.storage_of(study)
        assert isinstance(storage, optuna.storages.BaseStorage)
        assert storage is study.ask().storage  # what Trial.storage (public) is
        assert len(storage.get_all_trials(compat.study_id(study))) == 1


def test_study_id_is_the_storage_id_of_the_study(tmp_path: Path) -> None:
    study = journal_study(tmp_path)
    with relied_on("Study._study_id", "study_id"):
        assert compat.study_id(study) == compat.storage_of(study).get_study_id_from_name("c")


def test_trial_id_of_a_trial_and_a_frozen_trial(tmp_path: Path) -> None:
    study = sqlite_study(tmp_path)
    study.ask()
    trial = study.ask()
    with relied_on("Trial._trial_id / FrozenTrial._trial_id", "trial_id"):
        storage = compat.storage_of(study)
        expected = storage.get_trial_id_from_study_id_trial_number(compat.study_id(study), trial.number)
        assert compat.trial_id(trial) == expected
        frozen = study.get_trials(deepcopy=False)[trial.number]
        assert isinstance(frozen, FrozenTrial) and compat.trial_id(frozen) == expected


def test_cached_frozen_trial_is_what_trial_user_attrs_reads(tmp_path: Path) -> None:
    trial = sqlite_study(tmp_path).ask()
    with relied_on("Trial._cached_frozen_trial", "cached_frozen_trial"):
        cached = compat.cached_frozen_trial(trial)
        assert isinstance(cached, FrozenTrial)
        cached.user_attrs["k"] = 1  # what records.BufferedTrial.flush does after writing past the Trial
        assert trial.user_attrs["k"] == 1


def test_wrapped_storage_and_journal_file_path(tmp_path: Path) -> None:
    rdb_study, journal = sqlite_study(tmp_path), journal_study(tmp_path)
    with relied_on("_CachedStorage._backend (the RDBStorage it wraps)", "wrapped_storage"):
        inner = compat.wrapped_storage(compat.storage_of(rdb_study))
        assert isinstance(inner, optuna.storages.RDBStorage) and inner.url == f"sqlite:///{tmp_path}/c.db"
    with relied_on("JournalStorage._backend", "wrapped_storage"):
        backend = compat.wrapped_storage(compat.storage_of(journal))
        assert isinstance(backend, optuna.storages.journal.JournalFileBackend)
    with relied_on("JournalFileBackend._file_path", "journal_file_path"):
        assert compat.journal_file_path(backend) == str(tmp_path / "c.log")
    assert compat.wrapped_storage(optuna.storages.InMemoryStorage()) is None
    assert compat.journal_file_path(inner) is None


# ---------------------------------------------------------------- what a sampler reads


def _finished(study: optuna.Study) -> None:
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    pruned = study.ask()
    pruned.suggest_float("x", 0, 1)
    study.tell(pruned, state=TrialState.PRUNED)


def test_study_trials_is_what_samplers_read(tmp_path: Path) -> None:
    study = sqlite_study(tmp_path)
    _finished(study)
    with relied_on("Study._get_trials", "study_trials"):
        everything = compat.study_trials(study, deepcopy=False, use_cache=True)
        assert [t.number for t in everything] == [t.number for t in study.get_trials(deepcopy=False)]
        pruned = compat.study_trials(study, states=(TrialState.PRUNED,))
        assert [t.number for t in pruned] == [3]


class _Halved(compat.StudyView):
    """Shows the sampler only the even-numbered trials, counting how often it was asked."""

    def __init__(self, study: optuna.Study) -> None:
        super().__init__(study)
        self.asked: list[bool] = []

    def shown_trials(self, deepcopy: bool, states: Any, use_cache: bool) -> list[FrozenTrial]:
        self.asked.append(use_cache)
        return [t for t in super().shown_trials(deepcopy, states, use_cache) if t.number % 2 == 0]


def test_a_study_view_is_what_tpe_reads_the_trials_from(tmp_path: Path) -> None:
    study = sqlite_study(tmp_path)
    _finished(study)
    view = _Halved(study)
    with relied_on("Study._get_trials (as TPESampler calls it)", "StudyView"):
        assert view.study_name == study.study_name and view.directions == study.directions  # the rest: the study's
        assert [t.number for t in view.trials] == [0, 2]
        assert [t.number for t in view.get_trials(states=(TrialState.COMPLETE,))] == [0, 2]
        sampler = optuna.samplers.TPESampler(n_startup_trials=1, seed=0)
        trial = study.ask()
        view.asked.clear()
        frozen = compat.storage_of(study).get_trial(compat.trial_id(trial))
        sampler.sample_independent(view, frozen, "x", optuna.distributions.FloatDistribution(0, 1))
        assert True in view.asked  # TPE reads the trials through `_get_trials(..., use_cache=True)`


def test_hypervolume_in_two_and_three_dimensions() -> None:
    import numpy as np

    with relied_on("optuna._hypervolume.compute_hypervolume", "hypervolume"):
        two = compat.hypervolume(np.array([[1.0, 2.0], [2.0, 1.0]]), np.array([3.0, 3.0]))
        assert two == pytest.approx(3.0)  # 2x1 + 1x2 - the shared 1x1
        three = compat.hypervolume(np.array([[0.0, 0.0, 0.0]]), np.array([1.0, 2.0, 3.0]))
        assert three == pytest.approx(6.0)


# ---------------------------------------------------------------- heartbeats and stale trials


def _age_heartbeats(tmp_path: Path) -> None:
    """Every heartbeat of c.db a day old (SQLite's clock has one-second steps: no sleeping through a grace)."""
    with contextlib.closing(sqlite3.connect(tmp_path / "c.db")) as db:
        db.execute("UPDATE trial_heartbeats SET heartbeat = datetime('now', '-1 day')")
        db.commit()


@pytest.mark.filterwarnings(HEARTBEAT_WARNING)
def test_heartbeat_enabled_is_what_optimize_checks(tmp_path: Path) -> None:
    with relied_on("optuna.storages._heartbeat.is_heartbeat_enabled", "heartbeat_enabled"):
        beating = sqlite_study(tmp_path, heartbeat_interval=1, grace_period=2)
        assert compat.heartbeat_enabled(compat.storage_of(beating))  # through Optuna's _CachedStorage
        (tmp_path / "plain").mkdir()
        assert not compat.heartbeat_enabled(compat.storage_of(sqlite_study(tmp_path / "plain")))
        assert not compat.heartbeat_enabled(compat.storage_of(journal_study(tmp_path)))


@pytest.mark.filterwarnings(HEARTBEAT_WARNING)
def test_stale_trial_ids_are_the_running_trials_without_a_recent_heartbeat(tmp_path: Path) -> None:
    study = sqlite_study(tmp_path, heartbeat_interval=1, grace_period=2)
    storage = compat.storage_of(study)
    stale, fresh = study.ask(), study.ask()
    storage.record_heartbeat(compat.trial_id(stale))  # type: ignore[attr-defined]
    _age_heartbeats(tmp_path)
    storage.record_heartbeat(compat.trial_id(fresh))  # type: ignore[attr-defined]
    with relied_on("RDBStorage._get_stale_trial_ids (through _CachedStorage)", "stale_trial_ids"):
        assert compat.stale_trial_ids(storage, compat.study_id(study)) == [compat.trial_id(stale)]
        assert study.trials[stale.number].state == TrialState.RUNNING  # found, not failed


class _Recording(compat.HookedRDBStorage):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.templates: list[FrozenTrial | None] = []
        self.stale: list[list[int]] = []

    def new_trial_template(self, template_trial: FrozenTrial | None) -> FrozenTrial:
        self.templates.append(template_trial)
        return template_trial or optuna.trial.create_trial(state=TrialState.RUNNING, user_attrs={"stamped": True})

    def stale_found(self, trial_ids: list[int]) -> None:
        self.stale.append(list(trial_ids))


@pytest.mark.filterwarnings(HEARTBEAT_WARNING)
def test_hooked_rdb_storage_sees_every_new_trial_and_the_stale_ones(tmp_path: Path) -> None:
    storage = _Recording(f"sqlite:///{tmp_path}/c.db", heartbeat_interval=1, grace_period=2)
    study = optuna.create_study(storage=storage, study_name="c")
    with relied_on("RDBStorage._create_new_trial (what _CachedStorage.create_new_trial calls)",
                   "HookedRDBStorage.new_trial_template"):
        trial = study.ask()  # through Optuna's _CachedStorage
        study.enqueue_trial({"x": 1.0})
        assert storage.templates[0] is None and isinstance(storage.templates[1], FrozenTrial)
        assert trial.user_attrs == {"stamped": True}  # written in the write that creates the trial
    storage.record_heartbeat(compat.trial_id(trial))
    _age_heartbeats(tmp_path)
    with relied_on("RDBStorage._get_stale_trial_ids (what fail_stale_trials calls)", "HookedRDBStorage.stale_found"):
        optuna.storages.fail_stale_trials(study)
        assert storage.stale == [[compat.trial_id(trial)]]
        assert study.trials[trial.number].state == TrialState.FAIL


# ---------------------------------------------------------------- writing user attrs in one go


def test_rdb_session_finds_a_trial_row_and_commits(tmp_path: Path) -> None:
    study = sqlite_study(tmp_path)
    trial = study.ask()
    rdb = compat.wrapped_storage(compat.storage_of(study))
    with relied_on("optuna.storages._rdb.storage._create_scoped_session, models.TrialModel.find_or_raise_by_id",
                   "rdb_session / find_trial_row / trial_model"):
        with compat.rdb_session(rdb) as session:
            row = compat.find_trial_row(session, compat.trial_id(trial))
            assert isinstance(row, compat.trial_model())
            assert row.trial_id == compat.trial_id(trial) and TrialState(row.state) == TrialState.RUNNING
            session.add(compat.user_attr_model()(trial_id=row.trial_id, key="k", value_json="7"))
        assert study.trials[trial.number].user_attrs == {"k": 7}  # committed at the end of the block
        with pytest.raises(KeyError), compat.rdb_session(rdb) as session:
            compat.find_trial_row(session, 10_000)


def test_user_attr_model_is_the_table_the_upsert_writes(tmp_path: Path) -> None:
    with relied_on("optuna.storages._rdb.models.TrialUserAttributeModel", "user_attr_model"):
        table = compat.user_attr_model().__table__
        assert table.name == "trial_user_attributes"
        assert {"trial_id", "key", "value_json"} <= set(table.c.keys())
        uniques = [{c.name for c in u.columns} for u in table.constraints if type(u).__name__ == "UniqueConstraint"]
        assert {"trial_id", "key"} in uniques  # records._upsert's ON CONFLICT (trial_id, key)


def test_journal_append_user_attrs_is_one_append_replayed_everywhere(tmp_path: Path) -> None:
    study = journal_study(tmp_path)
    trial = study.ask()
    storage = compat.storage_of(study)
    backend = compat.wrapped_storage(storage)
    appends: list[int] = []
    append = backend.append_logs
    backend.append_logs = lambda logs: appends.append(len(logs)) or append(logs)  # type: ignore[method-assign]
    with relied_on("JournalStorage._thread_lock/_replay_result/_backend.append_logs/_sync_with_backend, "
                   "optuna.storages.journal._storage.JournalOperation", "journal_append_user_attrs"):
        compat.journal_append_user_attrs(storage, compat.trial_id(trial), {"a": 1, "b": [2, 3]})
        assert appends == [2]
        assert storage.get_trial(compat.trial_id(trial)).user_attrs == {"a": 1, "b": [2, 3]}  # replayed here
        again = optuna.load_study(study_name="c", storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(tmp_path / "c.log"))))
        assert again.trials[trial.number].user_attrs == {"a": 1, "b": [2, 3]}  # and in the file


# ---------------------------------------------------------------- the optimize logger


class _Seen(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False  # (keeps the test's output quiet)


def _fail(trial: optuna.Trial) -> float:
    raise ValueError("boom")


def test_optimize_logs_a_failed_trial_on_the_filtered_logger(tmp_path: Path) -> None:
    seen = _Seen()
    with relied_on(f"the logger {compat.OPTIMIZE_LOGGER!r} (a failed trial's warning, with exc_info)",
                   "OPTIMIZE_LOGGER / optimize_log_filter"):
        with compat.optimize_log_filter(seen):
            assert seen in logging.getLogger(compat.OPTIMIZE_LOGGER).filters
            optuna.create_study().optimize(_fail, n_trials=1, catch=(ValueError,))
        failed = [r for r in seen.records if r.getMessage().startswith("Trial 0 failed")]
        assert failed and failed[0].exc_info is not None and isinstance(failed[0].exc_info[1], ValueError)
    assert seen not in logging.getLogger(compat.OPTIMIZE_LOGGER).filters  # removed after the block


def test_optimize_log_filter_leaves_an_outer_blocks_filter() -> None:
    log = logging.getLogger(compat.OPTIMIZE_LOGGER)
    f = logging.Filter()
    with compat.optimize_log_filter(f):
        with compat.optimize_log_filter(f):
            pass
        assert f in log.filters  # the inner block did not add it, so it does not remove it
    assert f not in log.filters


def _autotune_filters() -> list[logging.Filter]:
    return [f for f in logging.getLogger(compat.OPTIMIZE_LOGGER).filters if type(f).__module__.startswith("autotune")]


def test_runs_leave_optunas_logger_without_autotune_filters(tmp_path: Path) -> None:
    """`autotune.run`'s and the worker loop's optimize calls filter Optuna's log while they run, not after."""
    from autotune import config
    from autotune.study import runner as study_mod
    from autotune.study import workers
    from autotune.study.objective import Objective

    assert _autotune_filters() == []  # importing the objective added none
    during: list[list[str]] = []

    def fit(ctx: Any) -> None:
        import torch

        during.append(sorted(type(f).__name__ for f in _autotune_filters()))
        ctx.prepare(torch.nn.Linear(1, 1))
        for epoch in ctx.epochs():
            ctx.report(val_accuracy=0.5, val_loss=1.0 / epoch)

    def cfg(name: str) -> config.RunConfig:
        return config.from_dict({"study": {"name": name, "storage": f"sqlite:///{tmp_path}/r.db", "n_trials": 2,
                                           "sampler": "random", "seed": 0},
                                 "train": {"device": "cpu", "epochs": 1},
                                 "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
                                 "pruning": {"pruner": "none"}}, source=str(tmp_path / "r.yaml"))

    study_mod.run(cfg("run"), fit=fit)
    assert _autotune_filters() == []
    during_run = during[:]
    worker = cfg("worker")
    workers.run_worker(worker, objective=Objective(worker, fit), study=study_mod.open_study(worker))
    assert _autotune_filters() == []
    assert during_run == [["_NoTraceback"]] * 2
    assert during[2:] == [["_NoTraceback", "_SurplusLogFilter"]] * 2


# ---------------------------------------------------------------- the version bounds


def test_pyproject_bounds_contain_the_installed_optuna() -> None:
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    req = next(Requirement(d) for d in deps if Requirement(d).name == "optuna")
    assert any(s.operator == "<" for s in req.specifier), f"{req}: no upper bound (core/optuna_compat.py)"
    assert req.specifier.contains(optuna.__version__), \
        f"installed optuna {optuna.__version__} is outside pyproject.toml's {req}: test it, then move the bound"
