"""Shared fixtures: one torch thread, no meter outliving its test, quiet cores, PostgreSQL databases. Plain
helpers (the tiny digits study `tiny`, ROOT, ...) live in tests/support.py."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import optuna
import pytest
import torch

optuna.logging.set_verbosity(optuna.logging.WARNING)
# One torch thread per test process (and per subprocess a test starts): the tests' models are tiny,
# and on a 2-core machine shared with other processes, spinning OpenMP threads make them 5-10x slower.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A shell starts a background job (`pytest &`) with SIGINT ignored, and every process it spawns inherits that
# (autotune then leaves Ctrl-C ignored, as Python does): the Ctrl-C tests need the handler an interactive run has.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


TRIAL_THREADS = ("autotune-rss", "autotune-rapl", "autotune-power")  # a trial's meters: they end with it


@pytest.fixture(autouse=True)
def no_meter_outlives_its_test() -> Iterator[None]:
    """A trial's meter thread left polling after its test fails that test: 43 of them by mid-run once made the
    whole run about twice as slow (and its timing tests wrong) through the GIL."""
    before = {t for t in threading.enumerate() if t.name in TRIAL_THREADS}
    yield
    deadline, collected = time.monotonic() + 2.0, False
    while True:
        left = [t.name for t in threading.enumerate() if t.name in TRIAL_THREADS and t not in before and t.is_alive()]
        if not left or time.monotonic() > deadline:
            break
        if not collected:  # a context the test dropped (in a reference cycle): its meter ends with it
            gc.collect()
            collected = True
        time.sleep(0.02)
    assert not left, f"meter threads left running after the test: {left}"


@pytest.fixture
def quiet_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The contention check reads this process as never waiting for a core: a test of the slow rules alone, whose
    trials sleep to be slow, gets the same verdicts on a busy CI machine (there the rules rightly hold back a
    verdict on a time that is the machine's). Contention has its own tests, with real busy processes."""
    from autotune.core import contention

    monkeypatch.setattr(contention, "_schedstat", lambda: (time.process_time(), 0.0))


@pytest.fixture
def postgres_url() -> str:
    url = os.environ.get("AUTOTUNE_TEST_POSTGRES")
    if not url:
        if os.environ.get("AUTOTUNE_REQUIRE_POSTGRES"):
            pytest.fail("AUTOTUNE_TEST_POSTGRES is not set but AUTOTUNE_REQUIRE_POSTGRES is")
        pytest.skip("no PostgreSQL server: run `bash .ci/start_postgres.sh` and export AUTOTUNE_TEST_POSTGRES")
    return url


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    """A fresh database on the test server, dropped afterwards."""
    base = postgres_url  # the test server (conftest: skipped, or failed under AUTOTUNE_REQUIRE_POSTGRES)
    import psycopg

    plain = base.replace("postgresql+psycopg://", "postgresql://")
    db = f"autotune_w_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    head, _, _ = plain.rpartition("/")
    yield f"{head}/{db}"  # plain postgresql://: make_storage must pick psycopg 3 by itself
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
