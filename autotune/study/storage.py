"""Storages: a study's URL (sqlite:///, postgresql://, mysql://, journal:///, grpc://) opened as an Optuna storage,
checked before anything is written, and the config a study keeps read back from it.

Every way in (`autotune run`,
`--workers`, `autotune worker`, `report`, `dashboard`, warm starts) opens its storage here, so SQLite always waits
for locks in WAL mode, PostgreSQL always gets a driver that is installed, every trial is stamped with its owner
(orphans.py) and every unreachable storage is the same one-line error. The read-only commands (report, best,
dashboard) open it `read_only`: opening a storage that exists writes nothing (SQLite's journal mode is left as it
is, the journal's lock is not taken), so a study on read-only media can be read. A storage that fails later (a full
disk, a database server gone) is one line too (`faults_named`). Passwords never leave this module unredacted
(errors.redact).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna

from autotune.config import from_dict
from autotune.core import AutotuneError, ConfigError, StorageFault, redact, storage_fault
from autotune.spec import RunConfig, StudyRecord
from autotune.study import orphans, proxy, records
from autotune.study.journal_lock import JournalFile

SHARED = "journal:///path on one machine or postgresql://USER:PASSWORD@HOST/DB (or mysql://...) across machines"


# ---------------------------------------------------------------- opening


def make_storage(cfg: RunConfig, read_only: bool = False, create: bool = True) -> optuna.storages.BaseStorage:
    """The study's storage; an unreachable one is a ConfigError before anything is written. `read_only` (report,
    best, dashboard): opening a storage that exists writes nothing (no directory made, SQLite left in its journal
    mode, the journal's lock not taken), so a study on a read-only mount can be read; one that does not exist yet
    is made as usual (a dashboard watches it), or, with `create` False (report, best), is a ConfigError: a mistyped
    path makes no file."""
    url = cfg.study.storage
    file = cfg.file
    if not create:
        _must_exist(cfg, url)
    if url.startswith("journal://"):
        return _journal(cfg, url, file, read_only)
    if url.startswith(proxy.PREFIX):  # Optuna's gRPC storage proxy (`autotune storage-proxy`): no heartbeats
        return proxy.connect(url, file)
    if "://" not in url:
        raise ConfigError(file, "study.storage", f"must be a URL: sqlite:///path.db, postgresql://..., "
                                                 f"mysql://..., journal:///path.log or grpc://HOST:PORT; got {url!r}")
    kwargs: dict[str, Any] = {}
    engine: dict[str, Any] = {}
    shown = url  # (a read-only SQLite URL is rewritten to a file: URI; the message names the user's)
    if url.startswith("sqlite:///"):
        db = Path(url[len("sqlite:///"):])
        read_only = read_only and db.is_file()  # (none yet: made as before, for a dashboard to watch)
        if read_only:
            url = _sqlite_read_only(db)
        else:
            try:
                db.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ConfigError(file, "study.storage", f"cannot create {db.parent}: {e}") from None
        # A reader (the dashboard) and a writer share the file: wait for locks instead of failing.
        engine["connect_args"] = {"timeout": 60}
    elif url.startswith(("postgresql", "mysql")):
        url = shown = _sql_driver(url, file)
        engine["connect_args"] = {"connect_timeout": 10}
        engine["pool_pre_ping"] = True
    kwargs.update(_heartbeats(cfg) if not read_only else {})
    try:
        storage = _rdb(url, engine, kwargs)
        if url.startswith("sqlite:///") and not read_only:
            _sqlite_wal(storage)
        records.attach(storage)  # a trial's user attrs are written in the transaction that ends it
        return storage
    except ImportError:  # Optuna's "Failed to import DB access module ... Please install appropriate one"
        raise ConfigError(file, "study.storage", missing_driver(url)) from None
    except Exception as e:  # sqlalchemy's errors differ by driver
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(file, "study.storage", f"cannot reach {redact(shown)}: {msg}") from None


def _heartbeats(cfg: RunConfig) -> dict[str, Any]:
    """RDBStorage's heartbeat arguments where the study asks for them (SQLite too: owners may sit on another
    host)."""
    if cfg.study.heartbeat_interval is None:
        return {}
    return {"heartbeat_interval": cfg.study.heartbeat_interval,
            "grace_period": cfg.study.grace_period or 2 * cfg.study.heartbeat_interval,
            "heartbeat_stale_trial_callback": orphans.retry_once}


def _must_exist(cfg: RunConfig, url: str) -> None:
    """A file storage (SQLite, journal) a command that only reads was pointed at must exist: a mistyped path is
    one line, and no file is made."""
    for prefix in ("sqlite:///", "journal://"):
        path = url[len(prefix):] if url.startswith(prefix) else ""
        if path and not path.startswith(":memory:") and not Path(path).exists():
            study = f"no study {cfg.study.name!r}: " if cfg.file != "--storage" else ""
            raise ConfigError(cfg.file, "study.storage", f"{study}{path} does not exist (nothing is stored there yet)")


def _sqlite_read_only(db: Path) -> str:
    """SQLite opened without writing: on a read-only file system as immutable (a database in WAL mode, which `run`
    leaves, cannot be opened otherwise where its -shm file cannot be created); read-only where this process cannot
    write it; else as it is (the dashboard may write notes), only not switched to WAL."""
    if os.statvfs(db).f_flag & os.ST_RDONLY:
        return f"sqlite:///file:{db}?mode=ro&immutable=1&uri=true"
    if not (os.access(db, os.W_OK) and os.access(db.parent, os.W_OK)):
        return f"sqlite:///file:{db}?mode=ro&uri=true"
    return f"sqlite:///{db}"


@contextlib.contextmanager
def faults_named(cfg: RunConfig) -> Iterator[None]:
    """Around what reads or writes a study: a storage that fails (a full disk, a read-only file system, a database
    server gone) ends it as one StorageFault line naming the storage and what to do, not a driver's traceback
    (nor Optuna's `Should not reach`, raised while its failed write unwinds)."""
    try:
        yield
    except AutotuneError:
        raise
    except Exception as e:
        found = storage_fault(e)
        if found is None:
            raise
        what, todo = found
        raise StorageFault(f"{cfg.file}: study.storage: {redact(cfg.study.storage)}: {what}; what was stored "
                           f"before is kept: {todo}, then run the same command again to resume") from e


CREATE_TRIES = 5  # opening a new database: the losers of the race to create its tables try again


def _rdb(url: str, engine: dict[str, Any], kwargs: dict[str, Any]) -> optuna.storages.RDBStorage:
    """Optuna's RDBStorage. Workers started together on a new database race to create its tables: the losers
    see the winner's rows (a UNIQUE or "already exists" error) and simply open it again."""
    for attempt in range(CREATE_TRIES):
        try:
            with warnings.catch_warnings():  # heartbeat_interval is "experimental" in Optuna since 2.9
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return orphans.RDBStorage(url, engine_kwargs=engine, **kwargs)
        except Exception as e:
            if attempt == CREATE_TRIES - 1 or not _lost_create_race(e):
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")



def _lost_create_race(e: BaseException) -> bool:
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    text = str(e).lower()
    return isinstance(e, IntegrityError) or (isinstance(e, (OperationalError, ProgrammingError))
                                             and ("already exists" in text or "duplicate" in text))


def _journal(cfg: RunConfig, url: str, file: str, read_only: bool = False) -> optuna.storages.BaseStorage:
    """A journal file: several processes on one machine (or on NFS) without a database server."""
    if cfg.study.heartbeat_interval is not None and not read_only:
        raise ConfigError(file, "study.heartbeat_interval", "the journal backend has no heartbeats; use "
                                                            "postgresql://..., mysql://... or sqlite:///... for "
                                                            "them, or drop it")
    path = Path(url[len("journal://"):])
    read_only = read_only and path.is_file()  # (none yet: made as before, for a dashboard to watch)
    try:
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        # records written whole; a lock left by a SIGKILLed worker of this host is broken at once, not after 30 s
        backend = JournalFile(str(path), read_only=read_only)
        return orphans.JournalStorage(backend)  # (replays the file's log: a file that is no journal fails here)
    except OSError as e:
        raise ConfigError(file, "study.storage", f"cannot open journal file {path}: {e}") from None
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ConfigError(file, "study.storage", f"{path} is not an Optuna journal file ({type(e).__name__}); "
                                                 "journal:/// takes a new file or one a study wrote") from None


def _sql_driver(url: str, file: str) -> str:
    """`postgresql://` means psycopg2 to SQLAlchemy; use psycopg 3 (autotune[postgres]) when that is what is here."""
    if not url.startswith("postgresql://"):
        return url
    if importlib.util.find_spec("psycopg2") is not None:
        return url
    if importlib.util.find_spec("psycopg") is not None:
        return "postgresql+psycopg://" + url[len("postgresql://"):]
    raise ConfigError(file, "study.storage", missing_driver(url))


def missing_driver(url: str) -> str:
    """What to install when a SQL URL's driver cannot be imported (the one it names, or SQLAlchemy's default)."""
    scheme = url.split("://", 1)[0]
    dialect, _, driver = scheme.partition("+")
    if dialect == "postgresql":
        return (f"no PostgreSQL driver{f' ({driver})' if driver else ''} can be imported: pip install "
                "'autotune[postgres]' (psycopg 3, which postgresql:// and postgresql+psycopg:// URLs use)")
    if dialect == "mysql":
        return (f"no MySQL driver ({driver or 'mysqlclient, what mysql:// means'}) can be imported: pip install "
                "PyMySQL and write the URL as mysql+pymysql://USER:PASSWORD@HOST/DB")
    return f"the database driver {scheme}:// needs cannot be imported: install it (see SQLAlchemy's dialects)"


def _sqlite_wal(storage: optuna.storages.RDBStorage) -> None:
    """WAL journal mode: readers never block the writer, so the dashboard can watch a live study."""
    from sqlalchemy import text

    with storage.engine.connect() as conn:
        conn.execute(text("PRAGMA journal_mode=WAL"))
        conn.commit()


# ---------------------------------------------------------------- checks


def check_storage(cfg: RunConfig) -> None:
    """Can the storage be reached? SQLite and journal files are checked without being created."""
    url = cfg.study.storage
    for prefix in ("sqlite:///", "journal://"):
        if url.startswith(prefix):
            parent = Path(url[len(prefix):]).parent
            probe = parent
            while not probe.exists() and probe != probe.parent:
                probe = probe.parent
            if not probe.is_dir() or not os.access(probe, os.W_OK):
                raise ConfigError(cfg.file, "study.storage", f"cannot create {parent}: not a writable directory")
            return
    make_storage(cfg)


def check_shared(cfg: RunConfig, n_workers: int, key: str = "study.storage") -> None:
    """SQLite serializes writers and fails them with "database is locked": refuse it for several workers."""
    url = cfg.study.storage
    if n_workers > 1 and url.startswith("sqlite"):
        name = cfg.study.name
        raise ConfigError(cfg.file, key, f"SQLite cannot take {n_workers} concurrent workers ({url}); use "
                                           f"journal:///studies/{name}.log on one machine or "
                                           f"postgresql://USER:PASSWORD@HOST/DB (or mysql://...) across machines")


def check_joinable(url: str) -> None:
    """`autotune worker --storage`: a storage other processes already write to; SQLite cannot be shared."""
    if url.startswith("sqlite"):
        raise ConfigError("--storage", "--storage", f"SQLite cannot be shared by workers ({url}); use {SHARED}")


# ---------------------------------------------------------------- the config a study keeps


def stored_config(cfg: RunConfig) -> dict[str, Any]:
    """The config a study keeps (and `autotune worker` rebuilds): with the storage password hidden, since
    anyone who can read the study reads it; workers get the real URL from --storage."""
    raw = cfg.to_dict()
    raw["study"]["storage"] = redact(raw["study"]["storage"])
    if raw["study"].get("warm_start"):
        raw["study"]["warm_start"]["storage"] = redact(raw["study"]["warm_start"]["storage"])
    return raw


def bare_config(url: str, name: str = "") -> RunConfig:
    """A config that only names a storage (and study), for commands given --storage without a YAML file."""
    return from_dict({"study": {"storage": url, **({"name": name} if name else {})}}, source="--storage")


def find_study(storage: optuna.storages.BaseStorage, url: str, name: str | None, file: str,
               key: str) -> optuna.Study:
    """The study `name` in `storage` (None: the only one there); a missing one names those that are there."""
    known = sorted(s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False))
    if name is None and len(known) == 1:
        name = known[0]
    if name not in known:
        raise ConfigError(file, key, f"no study {name!r} in {redact(url)}; known: {', '.join(known) or 'none'}")
    return optuna.load_study(study_name=name, storage=storage)


def load_stored(url: str, name: str | None, read_only: bool = False) -> tuple[optuna.Study, RunConfig]:
    """(study, the RunConfig it was started with) from its `config` user attr, pointed at `url` (the real URL:
    the stored one has its password hidden). `name` None: the only study in the storage."""
    study, record = read_stored(url, name, read_only)
    return study, config_of(study, record, url)


def read_stored(url: str, name: str | None, read_only: bool = False) -> tuple[optuna.Study, StudyRecord]:
    """(study, its stored record), the record read from the storage once: what is checked (a worker's code hash) is
    then what is run (`config_of` on the same record), whatever a writer changes in between."""
    study = find_study(make_storage(bare_config(url), read_only, create=not read_only), url, name, "--storage",
                       "--study")
    record = StudyRecord.of(study)
    if not isinstance(record.config, dict):
        raise ConfigError("--storage", "--study", f"study {study.study_name!r} was not made by autotune (no "
                                                  "`config` user attr)")
    return study, record


def config_of(study: optuna.Study, record: StudyRecord, url: str) -> RunConfig:
    """The RunConfig of a record `read_stored` read, pointed at `url`."""
    assert record.config is not None  # (read_stored refuses a study without one)
    return from_dict(record.config, overrides={"study.storage": url, "study.name": study.study_name},
                     source=stored_source(record))


def stored_source(record: StudyRecord) -> str:
    """The path of the run file a stored config came from."""
    return str(record.source if record.source is not None else "<config>")
