"""Load with faults: `autotune worker` processes on one study, a random one SIGKILL-ed after every few finished
trials and restarted (bench/faults.py, run for real: real processes, real SIGKILL, a real PostgreSQL server and a
journal file). Smaller than the bench's 8 workers x 200 trials, the same mechanism; checked here again
from the storage itself, not only from the bench's own verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune import config
from autotune.study import budget
from autotune.study import storage as storage_mod
from tests.support import FINISHED

ROOT = Path(__file__).resolve().parent.parent
N, WORKERS, KILL_EVERY_TRIALS = 40, 4, 8  # kills by progress: as many on a fast machine as on a slow one


def run_bench(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "faults.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "faults.py"), "--trials", str(N), "--workers",
                        str(WORKERS), "--kill-every-trials", str(KILL_EVERY_TRIALS), "--dir", str(tmp_path),
                        "--json", str(out), *args], env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(out.read_text())


def check_storage(study: optuna.Study) -> None:
    trials = study.get_trials()
    assert len([t for t in trials if t.state in FINISHED and not budget.is_surplus(t)]) == N  # (surplus: never ran)
    assert len({t.number for t in trials}) == len(trials)
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    orphaned = [t for t in trials if t.user_attrs.get("stop_reason") == "orphaned"]
    assert orphaned, "no worker was killed mid-trial: the test tested nothing"
    for t in orphaned:
        assert t.state == TrialState.FAIL
        if "failed_trial" not in t.system_attrs:  # retried once, with the settings it had drawn
            retries = [r for r in trials if r.system_attrs.get("failed_trial") == t.number]
            assert len(retries) == 1 and all(retries[0].params.get(k) == v for k, v in t.params.items())


def assert_report(r: dict) -> None:
    assert r["problems"] == [] and r["finished"] == N
    assert r["kills"] >= 3 and r["killed_mid_trial"] >= 1 and r["retries"] >= 1
    assert max(r["detect_s"]) < 60  # found by the other workers, not left for a human


@pytest.mark.slow
def test_journal_workers_killed_at_random_finish_exactly(tmp_path: Path) -> None:
    r = run_bench(tmp_path, "--storage", "journal")["journal"]
    assert_report(r)
    cfg = config.load(tmp_path / "journal" / "faults.yaml")
    check_storage(optuna.load_study(study_name="faults", storage=storage_mod.make_storage(cfg)))


@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_workers_killed_at_random_finish_exactly(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    r = run_bench(tmp_path, "--storage", "postgres", "--postgres", pg_url, "--keep")["postgres"]
    assert_report(r)
    cfg = config.load(tmp_path / "postgres" / "faults.yaml")
    check_storage(optuna.load_study(study_name="faults", storage=storage_mod.make_storage(cfg)))
