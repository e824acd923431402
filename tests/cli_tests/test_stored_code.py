"""Whose code runs: read-only commands (report, best, dashboard) never import the code a run file or a study names;
a worker runs a study's stored code only when the stored config is the one launched (its code hash) or it is told
to trust the storage; a study's name never picks where a file is written. Real subprocesses, as users run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune import config
from autotune.study import open_study, trust

ROOT = Path(__file__).resolve().parents[2]

EVIL = """
import os, pathlib
pathlib.Path(os.environ["MARK"]).write_text("imported")  # what an attacker's module does first
from tests.user_fits import fit_quick as fit
"""


@pytest.fixture
def code(tmp_path: Path) -> Path:
    """A folder with a user's module (it leaves a mark when imported) and a run file naming it, on a journal."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "evil.py").write_text(EVIL)
    (src / "g.yaml").write_text(f"study: {{name: g, storage: 'journal:///{tmp_path}/g.log', n_trials: 1}}\n"
                                "trainer: evil:fit\ntrain: {epochs: 1, batch_size: 64}\n")
    return src


def run(*args: str, cwd: Path, mark: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MARK": str(mark)}
    env.pop("AUTOTUNE_CODE_HASH", None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _created(code: Path, mark: Path) -> subprocess.CompletedProcess[str]:
    r = run("-m", "autotune", "run", "g.yaml", "--plain", cwd=code, mark=mark)  # the user's own run: imports it
    assert r.returncode == 0, r.stderr
    assert mark.exists()
    mark.unlink()
    return r


def test_report_best_and_dashboard_import_no_user_code(code: Path, tmp_path: Path) -> None:
    """Run from the code's own folder, where the module would import: still not imported (today: `report --storage`
    imported the stored trainer, with a folder the storage chose put on sys.path)."""
    mark = tmp_path / "IMPORTED"
    _created(code, mark)
    url = f"journal:///{tmp_path}/g.log"
    for args in (["report", "--storage", url, "--study", "g", "-o", "r1.html"], ["report", "g.yaml", "-o", "r2.html"],
                 ["best", "g.yaml", "--export", "best.yaml"], ["best", "g.yaml", "--storage", url]):
        r = run("-m", "autotune", *args, cwd=code, mark=mark)
        assert r.returncode == 0, (args, r.stderr)
        assert not mark.exists(), args
    assert (code / "r1.html").is_file() and (code / "r2.html").is_file() and (code / "best.yaml").is_file()
    r = run("-c", "from autotune.observe import dashboard; dashboard.serve = lambda *a, **k: None; "
                  "from autotune.cli.app import main; raise SystemExit(main(['dashboard', 'g.yaml']))", cwd=code,
            mark=mark)
    assert r.returncode == 0, r.stderr
    assert not mark.exists()


def test_a_study_name_never_picks_where_the_report_is_written(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/n.db"
    cfg = config.from_dict({"study": {"name": "../../escaped", "storage": url, "n_trials": 1}},
                           source=str(tmp_path / "n.yaml"))
    open_study(cfg)
    here = tmp_path / "a" / "b"
    here.mkdir(parents=True)
    r = run("-m", "autotune", "report", "--storage", url, "--study", "../../escaped", cwd=here, mark=tmp_path / "m")
    assert r.returncode == 0, r.stderr
    assert (here / "_.._escaped.html").is_file() and not (tmp_path / "escaped.html").exists()


def test_a_worker_runs_stored_code_only_when_it_is_what_was_launched(code: Path, tmp_path: Path) -> None:
    mark = tmp_path / "IMPORTED"
    url = f"journal:///{tmp_path}/g.log"
    (code / "g.yaml").write_text((code / "g.yaml").read_text().replace("n_trials: 1", "n_trials: 2"))
    r = _created(code, mark)
    printed = [ln for ln in r.stderr.splitlines() if ln.startswith("note: other machines join with: ")]
    study = optuna.load_study(study_name="g", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(f"{tmp_path}/g.log")))
    h = trust.study_hash(study)
    assert h is not None and printed == [f"note: other machines join with: autotune worker --storage '{url}' --study g "
                                         f"--code-hash {h}"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    worker = ["-m", "autotune", "worker", "--storage", url, "--study", "g", "--n-trials", "3"]

    # no hash: one line, exit 2, nothing imported (today: the stored trainer was imported and run)
    r = run(*worker, cwd=code, mark=mark)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: --study: --code-hash: study 'g' in ") and "runs code its stored config " \
        "names (trainer: evil:fit): a worker runs it only when it is what was launched" in r.stderr
    assert not mark.exists()

    # the stored config changed since it was launched (someone who can write the storage): refused
    raw = dict(study.user_attrs["config"])
    study.set_user_attr("config", {**raw, "trainer": "evil:fit", "train": {**raw["train"], "epochs": 2}})
    r = run(*worker, "--code-hash", h, cwd=code, mark=mark)
    assert r.returncode == 2 and "its stored config is not the one launched" in r.stderr, r.stderr
    assert not mark.exists()
    study.set_user_attr("config", raw)

    # the launched config, with its hash: it runs (from the study's own folder, where its module is)
    r = run(*worker, "--code-hash", h, cwd=code, mark=mark)
    assert r.returncode == 0, r.stderr
    assert mark.exists() and "ran 1 trial(s)" in r.stdout


@pytest.mark.slow
def test_trusting_the_storage_runs_stored_code_and_a_study_without_user_code_needs_nothing(
        code: Path, tmp_path: Path) -> None:
    mark = tmp_path / "IMPORTED"
    url = f"journal:///{tmp_path}/g.log"
    (code / "g.yaml").write_text((code / "g.yaml").read_text().replace("n_trials: 1", "n_trials: 2"))
    _created(code, mark)
    r = run("-m", "autotune", "worker", "--storage", url, "--study", "g", "--n-trials", "3", "--trust-stored-code",
            cwd=code, mark=mark)
    assert r.returncode == 0, r.stderr
    assert mark.exists()
    plain = config.from_dict({"study": {"name": "plain", "storage": url, "n_trials": 1},
                              "model": {"name": "mlp", "hidden": 16}, "train": {"epochs": 1}},
                             source=str(tmp_path / "plain.yaml"))
    assert trust.study_hash(open_study(plain)) is None  # the built-in trainer: no code of the user's to vouch for
    r = run("-m", "autotune", "worker", "--storage", url, "--study", "plain", cwd=tmp_path, mark=mark)
    assert r.returncode == 0, r.stderr
    assert "ran 1 trial(s)" in r.stdout
