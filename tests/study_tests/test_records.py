"""A trial's record (its user attrs): kept in memory while it runs, written once, in the transaction that ends it."""

from __future__ import annotations

import collections
import contextlib
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from optuna.trial import TrialState
from sqlalchemy import event

from autotune import config
from autotune.search import samplers, space
from autotune.study import records, workers
from autotune.study import runner as study_mod
from autotune.study import storage as storage_mod
from autotune.study.objective import Objective
from autotune.training import EpochRecord

SPACE = {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
         "optimizer": {"type": "categorical", "choices": ["sgd", "adam"]},
         "batch_size": {"type": "categorical", "choices": [32, 64]}}


def cfg_for(tmp_path: Path, storage: str, n_trials: int = 4, **extra: Any) -> config.RunConfig:
    return config.from_dict({"study": {"name": f"r{uuid.uuid4().hex[:6]}", "storage": storage, "n_trials": n_trials,
                                       "sampler": "random", "seed": 0},
                             "train": {"device": "cpu", "epochs": 3}, "space": SPACE,
                             "pruning": {"pruner": "none"}, **extra}, source=str(tmp_path / "r.yaml"))


def no_training(ctx: Any) -> None:
    """Epochs and reports only: the bookkeeping of a trial, without the training."""
    ctx.prepare(torch.nn.Linear(1, 1))
    for epoch in ctx.epochs():
        ctx.report(val_accuracy=0.5 + 0.1 * epoch, val_loss=1.0 / epoch)


class WriteCounter:
    """Counts, on one SQLAlchemy engine, transactions that wrote something and the statements in them, and every
    statement and transaction (reads too)."""

    def __init__(self, engine: Any) -> None:
        self.reset()
        self._dirty: set[int] = set()
        event.listen(engine, "before_cursor_execute", self._execute)
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "begin", self._begin)

    def reset(self) -> None:
        self.commits = self.executed = self.transactions = 0
        self.statements: collections.Counter[str] = collections.Counter()

    def _begin(self, conn: Any) -> None:
        self.transactions += 1

    def _execute(self, conn: Any, cursor: Any, stmt: str, params: Any, context: Any, many: bool) -> None:
        self.executed += 1
        verb, _, rest = stmt.partition(" ")
        if verb in ("INSERT", "UPDATE", "DELETE"):
            self._dirty.add(id(conn))
            self.statements[f"{verb} {rest.split()[1] if verb != 'UPDATE' else rest.split()[0]}"] += 1

    def _commit(self, conn: Any) -> None:
        if id(conn) in self._dirty:
            self._dirty.discard(id(conn))
            self.commits += 1


def test_attrs_arrive_with_the_final_state_on_sqlite(tmp_path: Path) -> None:
    """Staged on an attached storage: nothing is written before tell, everything arrives with it."""
    cfg = cfg_for(tmp_path, f"sqlite:///{tmp_path}/r.db")
    study = study_mod.open_study(cfg)
    trial = study.ask()
    buffered = records.BufferedTrial(trial)
    buffered.record.history = [{"epoch": 1, "val_accuracy": 0.5}]
    buffered.record.stop_reason = "slow"
    buffered.flush()
    before = study._storage.get_trial(trial._trial_id).user_attrs  # (the storage stamped the trial's owner)
    assert "history" not in before and "stop_reason" not in before  # staged, not written yet
    study.tell(trial, state=TrialState.PRUNED)
    stored = optuna.load_study(study_name=cfg.study.name, storage=storage_mod.make_storage(cfg)).trials[0]
    assert stored.state == TrialState.PRUNED
    assert stored.user_attrs == {**before, "history": [{"epoch": 1, "val_accuracy": 0.5}], "stop_reason": "slow"}


@pytest.mark.parametrize("kind", ["journal", "in-memory"])
def test_attrs_written_at_flush_elsewhere(tmp_path: Path, kind: str) -> None:
    """Journal: one appended batch; in-memory: the public API. Both before the trial ends."""
    storage: Any = optuna.storages.InMemoryStorage() if kind == "in-memory" else \
        storage_mod.make_storage(cfg_for(tmp_path, f"journal:///{tmp_path}/r.log"))
    study = optuna.create_study(storage=storage, directions=["maximize"])
    trial = study.ask()
    buffered = records.BufferedTrial(trial)
    buffered.record.metrics.update({f"k{i}": float(i) for i in range(4)})
    buffered.record.history = [{"epoch": 1, "k0": 0.0}]
    buffered.flush()
    stored = study._storage.get_trial(trial._trial_id).user_attrs  # (a journal also holds the owner's stamp)
    assert {k: v for k, v in stored.items() if k.startswith(("k", "history"))} == \
        {**{f"k{i}": float(i) for i in range(4)}, "history": [{"epoch": 1, "k0": 0.0}]}
    assert trial.user_attrs["k3"] == 3.0 and trial.user_attrs["history"] == [{"epoch": 1, "k0": 0.0}]


def _plain_and_autotune(cfg: config.RunConfig, loop: str) -> tuple[WriteCounter, WriteCounter, optuna.Study]:
    """Write transactions and statements of `n_trials` plain ask / suggest / tell trials, then of autotune's loop
    (`autotune run`'s, or the worker loop of `--workers` and `autotune worker`), each counted from its first trial."""
    n = cfg.study.n_trials
    assert n is not None
    # (at INFO, Optuna's log line of each finished trial reads the study's metric names: a read plain lacks)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    plain_storage = storage_mod.make_storage(cfg)
    plain_counter = WriteCounter(plain_storage.engine)
    plain = optuna.create_study(storage=plain_storage, sampler=samplers.make_sampler(cfg), directions=cfg.directions)
    plain_counter.reset()
    for _ in range(n):
        t = plain.ask()
        space.sample(t, cfg)
        plain.tell(t, [0.5, 0.1])

    opened: list[WriteCounter] = []
    make = storage_mod.make_storage

    def counting(c: config.RunConfig, read_only: bool = False, create: bool = True) -> Any:
        s = make(c, read_only=read_only, create=create)
        opened.append(WriteCounter(s.engine))
        return s

    storage_mod.make_storage = counting  # type: ignore[assignment]
    try:
        if loop == "worker":
            study = study_mod.open_study(cfg)
            opened[-1].reset()
            workers.run_worker(cfg, objective=Objective(cfg, no_training), study=study)
        else:  # on_start: the study exists and holds its own attrs: trials next
            study = study_mod.run(cfg, fit=no_training, on_start=lambda s, todo: opened[-1].reset())
    finally:
        storage_mod.make_storage = make  # type: ignore[assignment]
    trials = study.trials
    assert len(trials) == n and all(t.state == TrialState.COMPLETE for t in trials)
    assert {"settings", "seed", "history", "epoch_values", "val_accuracy", "epochs_run"} <= set(trials[-1].user_attrs)
    assert len(trials[-1].user_attrs["history"]) == 3
    return plain_counter, opened[-1], study


def test_a_trial_costs_no_write_transaction_more_than_plain_ask_tell(tmp_path: Path) -> None:
    """autotune's loop (`autotune run`: sampling, the objective, the stop rules, ~20 user attrs) commits as many
    write transactions per trial as plain Optuna's ask / suggest / tell on the same storage: the attrs ride in
    the transaction that ends the trial (one more statement there)."""
    n = 6
    plain, auto, _ = _plain_and_autotune(cfg_for(tmp_path, f"sqlite:///{tmp_path}/r.db", n_trials=n), "run")
    # the same statements as plain ask/tell (the storage's own owner stamp included), and one insert of the
    # trial's attrs, inside the same number of write transactions
    assert auto.statements - plain.statements == collections.Counter({"INSERT trial_user_attributes": n}), \
        (auto.statements, plain.statements)
    assert auto.commits <= plain.commits, (auto.commits, plain.commits)


@pytest.mark.postgres
@pytest.mark.parametrize("loop", ["run", "worker"])
def test_a_trial_on_postgres_costs_the_statements_of_plain_ask_tell(tmp_path: Path, postgres_url: str,
                                                                    loop: str) -> None:
    """On PostgreSQL (one round trip per statement and per transaction), every SQL statement counted, reads
    too: `autotune run`'s loop sends plain ask/tell's statements plus the one insert of the trial's attrs; the
    worker loop also reads the study once per trial (the budget and dead workers' trials: budget.next_step)."""
    n = 8
    with _database(postgres_url) as url:
        plain, auto, study = _plain_and_autotune(cfg_for(tmp_path, url, n_trials=n), loop)
        study._storage._backend.engine.dispose()
    extra_reads = 0 if loop == "run" else 1
    # per trial: the attrs' insert, and the worker's read of the study (SELECT studies, SELECT trials: the
    # trials it returns are cached by then); once per run: the budget's first count, the probe records
    assert auto.executed <= plain.executed + n * (1 + 2 * extra_reads) + 12, (auto.executed, plain.executed)
    assert auto.transactions <= plain.transactions + n * extra_reads + 4, (auto.transactions, plain.transactions)
    assert auto.statements - plain.statements == collections.Counter({"INSERT trial_user_attributes": n}), \
        (auto.statements, plain.statements)
    assert auto.commits <= plain.commits, (auto.commits, plain.commits)


@contextlib.contextmanager
def _database(postgres_url: str) -> Iterator[str]:
    """A fresh database on the test server (its URL), dropped afterwards."""
    import psycopg

    db = f"autotune_rec_{uuid.uuid4().hex[:8]}"
    plain = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    try:
        yield f"{plain.rpartition('/')[0]}/{db}"
    finally:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def test_worker_loop_attrs_and_pruners_read_finished_trials(tmp_path: Path) -> None:
    """The worker loop on a journal: per-epoch records of finished trials are there for the Pareto pruner."""
    cfg = cfg_for(tmp_path, f"journal:///{tmp_path}/w.log", n_trials=4, objectives=["val_accuracy", "train_time_s"])
    study = study_mod.open_study(cfg)
    workers.run_worker(cfg, objective=Objective(cfg, no_training), study=study)
    done = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(done) == 4
    assert all(len(t.user_attrs["epoch_values"]) == 3 for t in done)
    assert all(t.user_attrs["history"][-1]["epoch"] == 3 for t in done)


@pytest.mark.postgres
def test_attrs_arrive_with_the_final_state_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    with _database(postgres_url) as url:
        res = study_mod.run(cfg_for(tmp_path, url, n_trials=3), fit=no_training)
        assert [len(t.user_attrs["history"]) for t in res.trials] == [3, 3, 3]
        res._storage._backend.engine.dispose()


def test_an_epochs_values_are_what_its_stored_history_holds() -> None:
    """`EpochRecord.value` (what the stop rules and `epoch_values` read) agrees with `as_dict` (what `history`
    stores): a measured field where it was measured, else a reported metric, else not known (NaN when stored)."""
    rec = EpochRecord(epoch=2, train_loss=0.5, epoch_time_s=1.0, train_time_s=2.0, samples_per_s=100.0,
                      data_wait_fraction=0.1, lr=0.01, peak_memory_mb=12.0, metrics={"val_accuracy": 0.9, "n": 3})
    stored = rec.as_dict()
    assert {k: rec.value(k) for k in stored if k != "epoch"} == {k: v for k, v in stored.items() if k != "epoch"}
    assert rec.value("energy_j") is None and "energy_j" not in stored  # a meter with nothing to read: absent
    assert rec.value("val_f1") is None
    values = records.epoch_values([rec], ["val_accuracy", "train_time_s", "val_f1"])
    assert values[0][:2] == [0.9, 2.0] and math.isnan(values[0][2])


def test_a_running_trial_stores_its_curve_at_a_rung_only_beside_other_workers_trials(tmp_path: Path) -> None:
    """Pareto ASHA's rung table holds other workers' running trials (search/pruners.RUNG_STATES): a trial that
    passes a rung while another trial runs stores its curve so far there (one write); alone, it writes nothing
    before its end, as plain ask/tell."""
    cfg = cfg_for(tmp_path, f"sqlite:///{tmp_path}/r.db", n_trials=1,
                  objectives=[{"metric": "val_accuracy", "direction": "maximize"},
                              {"metric": "train_time_s", "direction": "minimize"}],
                  pruning={"pruner": "pareto_asha", "pruner_args": {"min_epochs": 1, "n_startup_trials": 5}})
    storage = storage_mod.make_storage(cfg)
    counter = WriteCounter(storage.engine)
    study = optuna.create_study(storage=storage, sampler=samplers.make_sampler(cfg), directions=cfg.directions)
    counter.reset()
    study.optimize(Objective(cfg, no_training), n_trials=1)
    alone = counter.statements["INSERT trial_user_attributes"]
    study.ask()  # another worker's trial, running
    counter.reset()
    study.optimize(Objective(cfg, no_training), n_trials=1)
    assert counter.statements["INSERT trial_user_attributes"] - alone == 1  # at rung epoch 1, of epochs 3
    mine = study.trials[-1]
    assert mine.state == TrialState.COMPLETE and len(mine.user_attrs["epoch_values"]) == 3  # the end rewrote it
