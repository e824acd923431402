"""Storages: real SQLite files, journal files and the PostgreSQL server (AUTOTUNE_TEST_POSTGRES; each test that
needs it makes a database of its own), opened the way every run path opens them, and the config a study keeps
read back. An unreachable storage is one line naming the key, never a traceback."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune import config
from autotune.cli import app as cli
from autotune.core.errors import ConfigError
from autotune.study import orphans, records, storage
from autotune.study import runner as study_mod
from tests.support import tiny

ROOT = Path(__file__).resolve().parents[2]


def bare(url: str, **study: Any) -> config.RunConfig:
    return config.from_dict({"study": {"storage": url, **study}}, source="/x/s.yaml")


@pytest.fixture
def pg_db(postgres_url: str) -> Iterator[str]:
    """A fresh database on the test server as a plain postgresql:// URL (with its password), dropped afterwards."""
    import psycopg

    plain = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    db = f"autotune_st_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    yield f"{plain.rpartition('/')[0]}/{db}"
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


# ---------------------------------------------------------------- opening


def test_sqlite_file_is_created_in_wal_mode_with_a_busy_timeout(tmp_path: Path) -> None:
    db = tmp_path / "deep" / "er" / "s.db"
    st = storage.make_storage(bare(f"sqlite:///{db}"))
    assert isinstance(st, orphans.RDBStorage)  # every trial is stamped with its owner
    assert st in records._STAGED  # a trial's user attrs ride in the transaction that ends it
    optuna.create_study(study_name="s", storage=st).optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    assert db.is_file()
    with sqlite3.connect(db) as conn:  # WAL is a property of the file: any reader sees it
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with st.engine.connect() as conn:  # a writer waits 60 s for a lock instead of "database is locked"
        from sqlalchemy import text

        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 60_000
    again = optuna.load_study(study_name="s", storage=storage.make_storage(bare(f"sqlite:///{db}")))
    assert len(again.trials) == 2 and all(orphans.OWNER_ATTR in t.user_attrs for t in again.trials)


_OPEN = ("import sys\nfrom autotune import config\nfrom autotune.study import storage as s\n"
         "cfg = config.from_dict({'study': {'storage': sys.argv[1]}}, source='/x/s.yaml')\n"
         "print('ready', flush=True)\nsys.stdin.readline()\ns.make_storage(cfg)\n")


def _open_together(url: str, n: int = 4) -> list[tuple[int, str]]:
    """n processes that open one new database at the same instant, as `--workers n` or n `autotune worker`s do."""
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN, url], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    for p in procs:  # every interpreter has imported autotune
        assert p.stdout is not None and p.stdout.readline() == "ready\n", p.communicate()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    return [(p.wait(60), p.communicate()[1]) for p in procs]


@pytest.mark.slow
def test_workers_that_create_one_new_sqlite_file_at_once_all_open_it(tmp_path: Path) -> None:
    for rc, err in _open_together(f"sqlite:///{tmp_path}/new.db"):
        assert rc == 0, err


@pytest.mark.slow  # (7-14 s of real processes: the default run stays under 10 minutes)
def test_workers_that_create_one_new_postgres_schema_at_once_all_open_it(pg_db: str) -> None:
    for rc, err in _open_together(pg_db):
        assert rc == 0, err
    optuna.create_study(study_name="s", storage=pg_db.replace("postgresql://", "postgresql+psycopg://"))


def test_sqlite_heartbeats_are_passed_to_optuna(tmp_path: Path) -> None:
    st = storage.make_storage(bare(f"sqlite:///{tmp_path}/h.db", heartbeat_interval=5))
    assert st.heartbeat_interval == 5 and st.grace_period == 10  # grace defaults to two beats
    st = storage.make_storage(bare(f"sqlite:///{tmp_path}/h.db", heartbeat_interval=5, grace_period=7))
    assert st.grace_period == 7


def test_journal_file_is_shared_by_two_storages(tmp_path: Path) -> None:
    log = tmp_path / "sub" / "j.log"
    url = f"journal:///{log}"
    st = storage.make_storage(bare(url))
    assert isinstance(st, orphans.JournalStorage)
    optuna.create_study(study_name="j", storage=st).optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    assert log.is_file() and log.stat().st_size > 0
    other = optuna.load_study(study_name="j", storage=storage.make_storage(bare(url)))  # another process's view
    assert [t.state.name for t in other.trials] == ["COMPLETE"] * 3


@pytest.mark.parametrize("content", [b"study:\n  name: x\n", b'{"op_code": 0}\n', b"\xff\xfe\x00\x01oops\n"])
def test_a_journal_url_naming_a_file_that_is_no_journal_is_one_clear_error(tmp_path: Path, content: bytes) -> None:
    # a typo pointing journal:/// at a YAML, a log or a binary file: one line naming the key, not the journal
    # reader's traceback, and the file left as it was
    wrong = tmp_path / "run.yaml"
    wrong.write_bytes(content)
    with pytest.raises(ConfigError, match=r"^s\.yaml: study\.storage: .*run\.yaml is not an Optuna journal file"):
        storage.make_storage(bare(f"journal:///{wrong}"))
    assert wrong.read_bytes() == content


@pytest.mark.parametrize("scheme", ["sqlite:///", "journal:///"])
def test_a_reading_command_pointed_at_a_missing_file_makes_nothing(tmp_path: Path, scheme: str) -> None:
    # report and best open with create=False: a mistyped path is one line naming the key, and no file or folder
    # is made (a dashboard, create=True, still watches a storage not made yet)
    missing = tmp_path / "typo" / "study.db"
    with pytest.raises(ConfigError, match=r"^s\.yaml: study\.storage: no study 'cnn-digits': .*typo/study\.db does "
                                          r"not exist \(nothing is stored there yet\)$"):
        storage.make_storage(bare(f"{scheme}{missing}", name="cnn-digits"), read_only=True, create=False)
    assert not (tmp_path / "typo").exists()
    storage.make_storage(bare(f"{scheme}{missing}"), read_only=True)  # create: made as before
    assert missing.is_file()
    storage.make_storage(bare(f"{scheme}{missing}"), read_only=True, create=False)  # exists now: opens


def test_journal_refuses_heartbeats(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^s\.yaml: study\.heartbeat_interval: the journal backend has no "
                                          r"heartbeats; use postgresql://"):
        storage.make_storage(bare(f"journal:///{tmp_path}/j.log", heartbeat_interval=5))


def test_a_storage_that_is_not_a_url(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^s\.yaml: study\.storage: must be a URL: sqlite:///path\.db, "
                                          r"postgresql://\.\.\., mysql://\.\.\., journal:///path\.log or "
                                          r"grpc://HOST:PORT; "
                                          r"got 'studies/a\.db'$"):
        storage.make_storage(bare("studies/a.db"))


@pytest.mark.postgres
def test_postgres_plain_url_gets_an_installed_driver(pg_db: str) -> None:
    """`postgresql://` means psycopg2 to SQLAlchemy; without it, psycopg 3 (autotune[postgres]) is used."""
    import importlib.util

    st = storage.make_storage(bare(pg_db))
    want = "psycopg2" if importlib.util.find_spec("psycopg2") else "psycopg"
    assert st.engine.dialect.driver == want
    assert st.engine.pool._pre_ping  # a connection the server dropped is replaced, not an error mid-study
    study = optuna.create_study(study_name="p", storage=st, directions=["maximize", "minimize"])
    study.optimize(lambda t: (t.suggest_float("x", 0, 1), 1.0), n_trials=2)
    back = optuna.load_study(study_name="p", storage=storage.make_storage(bare(pg_db)))
    assert len(back.trials) == 2 and all(orphans.OWNER_ATTR in t.user_attrs for t in back.trials)
    st.engine.dispose()


# ---------------------------------------------------------------- unreachable: one line, nothing written


def test_unreachable_postgres_is_one_line_config_error(tmp_path: Path, capsys: Any) -> None:
    url = "postgresql://u:pw@127.0.0.1:1/x"  # nothing listens on port 1
    with pytest.raises(ConfigError, match=r"^s\.yaml: study\.storage: cannot reach postgresql\+psycopg://u:\*\*\*@"
                                          r"127\.0\.0\.1:1/x: ") as info:
        storage.make_storage(bare(url))
    assert "\n" not in str(info.value) and "pw" not in str(info.value)
    with pytest.raises(ConfigError, match=r"study\.storage: cannot reach"):
        storage.check_storage(bare(url))  # a server is checked by connecting
    run_file = tmp_path / "u.yaml"
    run_file.write_text(yaml.safe_dump({"study": {"storage": url}}))
    assert cli.main(["validate", str(run_file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: u.yaml: study.storage: cannot reach "), err


def test_sqlite_and_journal_checks_create_nothing(tmp_path: Path) -> None:
    for url in (f"sqlite:///{tmp_path}/new/dir/s.db", f"journal:///{tmp_path}/new/dir/j.log"):
        storage.check_storage(bare(url))
    assert list(tmp_path.iterdir()) == []
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    for url in (f"sqlite:///{blocker}/s.db", f"journal:///{blocker}/j.log"):
        with pytest.raises(ConfigError, match=rf"^s\.yaml: study\.storage: cannot create /*{blocker}: not a "
                                              r"writable directory$"):
            storage.check_storage(bare(url))


# ---------------------------------------------------------------- sharing a storage between workers


def test_sqlite_is_refused_for_several_workers_only(tmp_path: Path) -> None:
    cfg = bare(f"sqlite:///{tmp_path}/s.db", name="w")
    storage.check_shared(cfg, 1)
    with pytest.raises(ConfigError, match=r"^s\.yaml: study\.storage: SQLite cannot take 2 concurrent workers .*; "
                                          r"use journal:///studies/w\.log on one machine or postgresql://"):
        storage.check_shared(cfg, 2)
    with pytest.raises(ConfigError, match=r"^s\.yaml: --storage: SQLite cannot take 3"):
        storage.check_shared(cfg, 3, key="--storage")
    storage.check_shared(bare(f"journal:///{tmp_path}/j.log"), 8)
    with pytest.raises(ConfigError, match=r"^--storage: --storage: SQLite cannot be shared by workers"):
        storage.check_joinable(f"sqlite:///{tmp_path}/s.db")
    storage.check_joinable(f"journal:///{tmp_path}/j.log")
    assert not (tmp_path / "s.db").exists()


# ---------------------------------------------------------------- the config a study keeps, read back


def test_stored_config_hides_passwords() -> None:
    cfg = config.from_dict({"study": {"storage": "postgresql://u:hunter2@db/x",
                                      "warm_start": {"storage": "postgresql://v:swordfish@db/y", "study": "old"}}},
                           source="s.yaml")
    raw = storage.stored_config(cfg)
    assert raw["study"]["storage"] == "postgresql://u:***@db/x"
    assert raw["study"]["warm_start"]["storage"] == "postgresql://v:***@db/y"
    assert cfg.study.storage == "postgresql://u:hunter2@db/x"  # the run itself keeps the real one


def test_load_stored_rebuilds_the_run_config(tmp_path: Path) -> None:
    url = f"journal:///{tmp_path}/j.log"
    cfg = tiny(tmp_path, study={"storage": url, "name": "first"})
    study_mod.open_study(cfg)
    study, back = storage.load_stored(url, None)  # the only study there
    assert study.study_name == "first" and back.to_dict() == cfg.to_dict()
    assert back.source == cfg.source
    study_mod.open_study(tiny(tmp_path, study={"storage": url, "name": "second"}))
    assert storage.load_stored(url, "second")[1].study.name == "second"
    with pytest.raises(ConfigError, match=r"^--storage: --study: no study None in journal:///.*; known: first, "
                                          r"second$"):
        storage.load_stored(url, None)  # two: which one?
    with pytest.raises(ConfigError, match=r"^--storage: --study: no study 'nope' in .*; known: first, second$"):
        storage.load_stored(url, "nope")
    optuna.create_study(study_name="plain", storage=storage.make_storage(bare(url)))
    with pytest.raises(ConfigError, match=r"^--storage: --study: study 'plain' was not made by autotune"):
        storage.load_stored(url, "plain")


@pytest.mark.postgres
def test_load_stored_on_postgres_gets_the_real_url_back(tmp_path: Path, pg_db: str) -> None:
    """The study keeps its URL with the password hidden; whoever reads it back gives the real one."""
    cfg = tiny(tmp_path, study={"storage": pg_db, "name": "pg"})
    study_mod.open_study(cfg)
    study, back = storage.load_stored(pg_db, "pg")
    assert "***" in study.user_attrs["config"]["study"]["storage"]
    assert back.study.storage == pg_db and back.to_dict() == cfg.to_dict()
    study._storage._backend.engine.dispose()


def test_a_journal_append_after_a_worker_was_killed_holding_the_lock(tmp_path: Path) -> None:
    """A worker SIGKILLed mid-append leaves the journal's lock: the next append of another worker on this host
    goes through at once, not after Optuna's 30-second grace period (journal_lock.py)."""
    import signal
    import time

    from tests.support import hold_in_child

    cfg = bare(f"journal:///{tmp_path}/j.log")
    study = optuna.create_study(study_name="j", storage=storage.make_storage(cfg))
    child = hold_in_child(tmp_path / "j.log")
    try:
        child.send_signal(signal.SIGKILL)
        child.wait()
        t0 = time.monotonic()
        study.set_user_attr("after", 1)  # one append
        assert time.monotonic() - t0 < 3.0
    finally:
        child.kill()
    assert optuna.load_study(study_name="j", storage=storage.make_storage(cfg)).user_attrs["after"] == 1


@pytest.mark.parametrize(("url", "hint"), [
    ("postgresql://u:pw@127.0.0.1:1/x", r"no PostgreSQL driver can be imported: pip install 'autotune\[postgres\]'"),
    ("postgresql+psycopg://u:pw@127.0.0.1:1/x", r"no PostgreSQL driver \(psycopg\) can be imported: pip install "
                                                r"'autotune\[postgres\]'"),
    ("postgresql+psycopg2://u:pw@127.0.0.1:1/x", r"no PostgreSQL driver \(psycopg2\) can be imported: pip install "
                                                 r"'autotune\[postgres\]'"),
    ("mysql://u:pw@127.0.0.1:1/x", r"no MySQL driver \(mysqlclient, what mysql:// means\) can be imported: pip "
                                   r"install PyMySQL and write the URL as mysql\+pymysql://"),
    ("mysql+pymysql://u:pw@127.0.0.1:1/x", r"no MySQL driver \(pymysql\) can be imported"),
])
def test_a_storage_whose_driver_cannot_be_imported_names_what_to_install(url: str, hint: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    for module in ("psycopg", "psycopg2", "MySQLdb", "pymysql"):  # `import X` raises ImportError
        monkeypatch.setitem(__import__("sys").modules, module, None)
    path = tmp_path / "cnn.yaml"
    path.write_text(yaml.safe_dump({"study": {"storage": url}}))
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "pw" not in err, err
    assert re.search(rf"^error: cnn\.yaml: study\.storage: {hint}", err), err
