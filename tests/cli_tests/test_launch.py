"""`autotune launch`: real submitit jobs (its LocalExecutor: processes on this machine) sharing one study exactly,
the sbatch script a Slurm launch writes (a stand-in sbatch on PATH), and the refusals."""

from __future__ import annotations

import importlib.util
import os
import uuid
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.cli import app as cli
from autotune.cli import launch
from autotune.core.errors import ConfigError
from tests.support import assert_exact, load, write_cfg


def test_two_local_jobs_finish_a_six_trial_study_exactly(tmp_path: Path, capsys: Any) -> None:
    path = write_cfg(tmp_path, f"journal:///{tmp_path}/l.log", 6, name="l")
    rc = cli.main(["launch", str(path), "--executor", "local", "--workers", "2", "--logs", str(tmp_path / "logs"),
                   "--wait"])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    done = assert_exact(load(path), 6)
    assert sorted(t.number for t in done) == sorted({t.number for t in done})
    assert "submitted 2 local job(s) on study l" in out and "2 of 2 job(s) ended well" in out
    assert "autotune dashboard" in out and "autotune report" in out and str(tmp_path / "logs") in out
    logs = sorted((tmp_path / "logs").glob("*/*_log.out"))
    assert len(logs) == 2 and all("joined study l" in p.read_text() for p in logs)  # each job ran `autotune worker`


def _fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch and srun stand-ins: sbatch answers as Slurm does; the script submitit wrote stays in the logs."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "sbatch").write_text('#!/bin/sh\necho "Submitted batch job 4242"\n')
    (bin_ / "srun").write_text("#!/bin/sh\nexit 0\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")


def test_slurm_launch_writes_one_array_with_the_resources_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: Any) -> None:
    _fake_slurm(tmp_path, monkeypatch)
    path = write_cfg(tmp_path, f"journal:///{tmp_path}/s.log", 6, name="s", device="auto")
    logs = tmp_path / "logs"
    rc = cli.main(["launch", str(path), "--workers", "3", "--partition", "gpu", "--time", "1:30:00",
                   "--cpus-per-task", "4", "--logs", str(logs)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    script = (logs / "4242" / "4242_submission.sh").read_text()
    for line in ("--array=0-2%3", "--partition=gpu", "--time=90", "--gpus-per-node=1", "--cpus-per-task=4",
                 "--ntasks-per-node=1"):
        assert f"#SBATCH {line}\n" in script, script
    assert "4242_0 4242_1 4242_2" in out and "squeue -j 4242" in out
    assert "shared filesystem" in err  # a journal across nodes: said once, not refused
    study = load(path)  # created by the launcher, before any job runs
    assert study.user_attrs["config"]["study"]["n_trials"] == 6 and not study.trials


def test_a_password_never_reaches_the_logs_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  postgres_url: str) -> None:
    _fake_slurm(tmp_path, monkeypatch)
    secret = postgres_url.split("://", 1)[1].split("@", 1)[0] + "@"  # USER:PASSWORD@
    assert ":" in secret
    name = f"p{uuid.uuid4().hex[:8]}"
    path = write_cfg(tmp_path, postgres_url, 4, name=name, device="auto")
    assert cli.main(["launch", str(path), "--workers", "2", "--logs", str(tmp_path / "logs")]) == 0
    files = [p for p in (tmp_path / "logs").rglob("*") if p.is_file()]
    assert files and not [p for p in files if secret.encode() in p.read_bytes()]
    # the job reads the real URL from $AUTOTUNE_STORAGE, which sbatch hands on from the launching shell
    import pickle

    pkl = next((tmp_path / "logs").rglob("*_submitted.pkl"))
    delayed = pickle.loads(pkl.read_bytes())
    assert delayed.args == (None, name, None, None)  # (no code of the user's: no code hash)
    optuna.delete_study(study_name=name, storage=postgres_url)


def test_sqlite_is_refused_in_one_line(tmp_path: Path, capsys: Any) -> None:
    path = write_cfg(tmp_path, f"sqlite:///{tmp_path}/q.db", 6, name="q")
    assert cli.main(["launch", str(path), "--executor", "local", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "q.yaml: study.storage: SQLite cannot be shared" in err
    assert not (tmp_path / "q.db").exists()


def test_refusals_name_the_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    path = write_cfg(tmp_path, f"journal:///{tmp_path}/r.log", 6, name="r")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "submitit" else real(name, *a))
    assert cli.main(["launch", str(path), "--executor", "local"]) == 2
    assert "--executor: local jobs are submitted through submitit: pip install 'autotune[slurm]'" in \
        capsys.readouterr().err
    monkeypatch.setattr(importlib.util, "find_spec", real)
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    assert cli.main(["launch", str(path)]) == 2
    assert "--executor: slurm: no sbatch/srun on PATH" in capsys.readouterr().err
    for argv, text in ((["--executor", "pbs"], "--executor: unknown 'pbs'; known: debug, local, none, slurm"),
                       (["--workers", "0"], "--workers: must be >= 1; got 0"),
                       (["--time", "1h"], "--time: must be minutes or [D-]H:MM:SS")):
        assert cli.main(["launch", str(path), *argv]) == 2
        assert text in capsys.readouterr().err
    pinned = write_cfg(tmp_path, f"journal:///{tmp_path}/c.log", 6, name="c", device="cuda:1")
    assert cli.main(["launch", str(pinned), "--executor", "local"]) == 2
    assert "train.device: cuda:1: each job sees only its own GPU(s)" in capsys.readouterr().err
    assert not (tmp_path / "r.log").exists()


def test_executor_none_only_creates_the_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    path = write_cfg(tmp_path, "journal://rel/n.log", 6, name="n")
    monkeypatch.chdir(tmp_path)  # a relative journal path is made absolute for the jobs
    assert cli.main(["launch", str(path), "--executor", "none"]) == 0
    out = capsys.readouterr().out
    assert f"autotune worker --storage 'journal://{tmp_path}/rel/n.log' --study n" in out
    stored = yaml.safe_dump(load(path).user_attrs["config"])
    assert f"journal://{tmp_path}/rel/n.log" in stored


@pytest.mark.parametrize(("text", "minutes"), [("90", 90), ("1:30:00", 90), ("0:00:30", 1), ("2-01:00:00", 2940)])
def test_parse_time(text: str, minutes: int) -> None:
    assert launch.parse_time(text) == minutes


def test_parse_time_refuses_other_forms() -> None:
    with pytest.raises(ConfigError, match=r"--time: must be minutes or \[D-\]H:MM:SS.*got '90m'"):
        launch.parse_time("90m")


def test_debug_jobs_run_in_this_process_one_after_the_other(tmp_path: Path, capsys: Any) -> None:
    path = write_cfg(tmp_path, f"journal:///{tmp_path}/d.log", 3, name="d")
    assert cli.main(["launch", str(path), "--executor", "debug", "--workers", "2", "--logs",
                     str(tmp_path / "logs")]) == 0  # no --wait: debug jobs only run when waited for
    out = capsys.readouterr().out
    assert_exact(load(path), 3)
    assert "ran 3 trial(s)" in out and "ran 0 trial(s)" in out and "2 of 2 job(s) ended well" in out


def test_device_auto_on_a_machine_without_gpus_launches_cpu_workers(tmp_path: Path) -> None:
    """29.10: `--executor local --workers 2` with device auto and no GPU here: CPU workers, the cores split among
    them as --workers splits them (it refused with "need 2 GPUs but 0 visible" unless --gpus-per-task 0)."""
    import torch

    from autotune import config
    from autotune.core import contention
    from autotune.training.distributed.devices import cpu_cores

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here: device auto means GPU workers")
    cfg = config.load(write_cfg(tmp_path, f"journal:///{tmp_path}/a.log", 4, name="a", device="auto"))
    req = launch.Request(executor="local", workers=2)
    assert launch.gpus(cfg, req) == 0 and launch.job_threads(req) == contention.default_threads(2, n_cores=cpu_cores())
    assert launch.gpus(cfg, launch.Request(executor="slurm", workers=2)) == 1  # a cluster's nodes have their own
    assert launch.gpus(cfg, launch.Request(executor="local", workers=2, gpus_per_task=1)) == 1  # asked: kept
    assert launch.gpus(config.load(write_cfg(tmp_path, f"journal:///{tmp_path}/c.log", 4, name="c", device="cuda")),
                       req) == 1  # cuda asked by name: its refusal stays
    launch.create(cfg, req)
    assert load(tmp_path / "a.yaml").user_attrs["device"].startswith("cpu")  # not "auto: 1 GPU(s) per local job"


@pytest.mark.slow
def test_two_local_cpu_jobs_with_device_auto_finish_the_study(tmp_path: Path, capsys: Any) -> None:
    pytest.importorskip("submitit")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    path = write_cfg(tmp_path, f"journal:///{tmp_path}/l.log", 4, name="l", device="auto")
    rc = cli.main(["launch", str(path), "--executor", "local", "--workers", "2", "--logs", str(tmp_path / "logs"),
                   "--wait"])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert_exact(load(path), 4)


def test_a_study_that_runs_the_users_code_is_launched_with_its_code_hash(tmp_path: Path, capsys: Any) -> None:
    """The jobs (and the line for workers started elsewhere) carry the study's code hash: a worker runs the code
    the stored config names only while that config is the one launched (study/trust.py)."""
    from autotune.study import trust

    path = tmp_path / "c.yaml"
    path.write_text(f"study: {{name: c, storage: 'journal:///{tmp_path}/c.log', n_trials: 2}}\n"
                    "trainer: tests.user_fits:fit\ntrain: {epochs: 1, batch_size: 64}\n")
    assert cli.main(["launch", str(path), "--executor", "none"]) == 0
    h = trust.study_hash(load(path))
    assert h is not None and capsys.readouterr().out.rstrip().endswith(f"--study c --code-hash {h}")
