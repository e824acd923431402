"""Faults in whose code runs: a writer who can write a study's storage races a worker that was given the right
`--code-hash`. The worker is a real `autotune worker` process; the writer is another real process that rewrites the
stored config on the journal file at the one instant that matters (just after the worker's hash check passed), so
the race is won every time instead of by luck."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna

from autotune import config
from autotune.core import without_user_code
from autotune.study import open_study, trust

ROOT = Path(__file__).resolve().parents[2]

MODULE = """
import os, pathlib
pathlib.Path(os.environ["MARKS"], "{name}").write_text("imported")  # what this module does first
from tests.user_fits import fit_quick as fit
"""

# The writer: a separate process that flips the stored config to name the other module (what anyone who can write
# the storage could do). The hook runs it right after the worker's hash check passed, and waits for it.
FLIP = """
import sys, optuna
storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(sys.argv[1]))
study = optuna.load_study(study_name="g", storage=storage)
raw = dict(study.user_attrs["config"])
study.set_user_attr("config", {**raw, "trainer": "evil:fit"})
"""

HOOKED_WORKER = """
import subprocess, sys
from autotune.study import trust
checked = trust.check
def check_then_flip(*args, **kwargs):
    checked(*args, **kwargs)  # the hash matched the stored config as it was read
    subprocess.run([sys.executable, "-c", {flip!r}, {log!r}], check=True)  # ...and now the storage says otherwise
trust.check = check_then_flip
from autotune.cli.app import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_a_worker_runs_only_the_config_whose_hash_it_checked(tmp_path: Path) -> None:
    """Today the worker checked the hash on one read of the stored config and ran a second read: the flipped config
    ran `evil` (its mark written). One read now: the checked bytes are the ones run, and `evil` is never imported."""
    src, marks = tmp_path / "src", tmp_path / "marks"
    src.mkdir()
    marks.mkdir()
    for name in ("good", "evil"):
        (src / f"{name}.py").write_text(MODULE.format(name=name))
    log = tmp_path / "g.log"
    url = f"journal:///{log}"
    with without_user_code():  # the launcher's own study, as `autotune run` leaves it (nothing imported here)
        cfg = config.from_dict({"study": {"name": "g", "storage": url, "n_trials": 1}, "trainer": "good:fit",
                                "train": {"epochs": 1, "batch_size": 64}}, source=str(src / "g.yaml"))
        study = open_study(cfg)
    code_hash = trust.study_hash(study)
    assert code_hash is not None
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{src}", "OMP_NUM_THREADS": "1", "MARKS": str(marks)}
    env.pop("AUTOTUNE_CODE_HASH", None)
    r = subprocess.run([sys.executable, "-c", HOOKED_WORKER.format(flip=FLIP, log=str(log)), "worker", "--storage",
                        url, "--study", "g", "--code-hash", code_hash], cwd=src, env=env, capture_output=True,
                       text=True, timeout=300)
    assert not (marks / "evil").exists(), r.stdout + r.stderr  # today: imported and run
    assert r.returncode == 0, r.stderr
    assert (marks / "good").exists() and "ran 1 trial(s)" in r.stdout
    # the writer did flip it (the race was run, not skipped), and the trial that ran is the checked config's
    flipped = optuna.load_study(study_name="g", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(log))))
    assert flipped.user_attrs["config"]["trainer"] == "evil:fit"
    assert [t.state for t in flipped.get_trials()] == [optuna.trial.TrialState.COMPLETE]
