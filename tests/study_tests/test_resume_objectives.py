"""A study reopened with other objectives is refused on every way in, before anything is written: trials that
store one metric where the study keeps another would put a trial on a front it does not belong to."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune import config
from autotune.cli import app as cli
from autotune.core.errors import ConfigError
from autotune.study import runner as study_mod


def write(tmp_path: Path, objectives: list[Any], file: str) -> Path:
    raw = {"study": {"name": "t", "storage": f"journal:///{tmp_path}/t.log", "n_trials": 2, "seed": 0},
           "model": {"name": "cnn", "channels": [8, 16], "hidden": 32},
           "train": {"epochs": 1, "batch_size": 128}, "objectives": objectives}
    path = tmp_path / file
    path.write_text(yaml.safe_dump(raw))
    return path


def _fake_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An sbatch that leaves a mark: a launch refused before submitting never calls it."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    mark = tmp_path / "submitted"
    (bin_ / "sbatch").write_text(f'#!/bin/sh\ntouch {mark}\necho "Submitted batch job 4242"\n')
    (bin_ / "srun").write_text("#!/bin/sh\nexit 0\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    return mark


@pytest.mark.parametrize(("before", "after", "theirs", "ours"), [
    # another metric in the same direction: only the directions were compared
    (["val_accuracy", "train_time_s"], ["val_accuracy", {"metric": "val_loss", "direction": "minimize"}],
     r"val_accuracy \(maximize\), train_time_s \(minimize\)", r"val_accuracy \(maximize\), val_loss \(minimize\)"),
    # the same metrics in another order
    (["val_loss", "train_time_s"], ["train_time_s", "val_loss"],
     r"val_loss \(minimize\), train_time_s \(minimize\)", r"train_time_s \(minimize\), val_loss \(minimize\)"),
])
def test_other_objectives_are_refused_on_every_way_in(before: list[Any], after: list[Any], theirs: str, ours: str,
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", str(write(tmp_path, before, "first.yaml"))]) == 0
    capsys.readouterr()
    log = tmp_path / "t.log"
    stored = log.read_bytes()
    other = str(write(tmp_path, after, "cnn.yaml"))
    mark = _fake_sbatch(tmp_path, monkeypatch)
    for argv in (["validate", other], ["run", other], ["run", other, "--workers", "2"],
                 ["launch", other, "--workers", "2", "--logs", str(tmp_path / "logs")]):
        assert cli.main(argv) == 2, argv
        out = capsys.readouterr().err
        assert "Traceback" not in out, out
        err = out.strip().splitlines()[-1]  # launch's note on journal storages comes first
        assert err.startswith("error: cnn.yaml: objectives: study 't' in journal:///"), err
        assert re.search(rf"has objectives \[{theirs}\], this config \[{ours}\]", err), err
    assert log.read_bytes() == stored, "a refused config wrote to the study"
    assert not mark.exists(), "launch submitted jobs for a study it refused"


def test_a_study_that_kept_no_metrics_is_accepted_and_then_keeps_them(tmp_path: Path) -> None:
    cfg = config.from_dict({"study": {"name": "old", "storage": f"sqlite:///{tmp_path}/o.db"}},
                           source=str(tmp_path / "cnn.yaml"))
    optuna.create_study(study_name="old", storage=cfg.study.storage, directions=cfg.directions)
    assert study_mod.open_study(cfg).user_attrs["metrics"] == ["val_accuracy", "train_time_s"]
    other = config.from_dict({"study": {"name": "old", "storage": cfg.study.storage},
                              "objectives": ["val_accuracy", {"metric": "val_loss", "direction": "minimize"}]},
                             source=str(tmp_path / "cnn.yaml"))
    with pytest.raises(ConfigError, match=r"has objectives \[val_accuracy \(maximize\), train_time_s \(minimize\)\]"):
        study_mod.open_study(other)


def test_an_older_study_is_checked_against_its_stored_config(tmp_path: Path) -> None:
    """An autotune that kept the config but no `metrics` attr: the config's objectives are the study's."""
    cfg = config.from_dict({"study": {"name": "old", "storage": f"sqlite:///{tmp_path}/o.db"}},
                           source=str(tmp_path / "cnn.yaml"))
    study = optuna.create_study(study_name="old", storage=cfg.study.storage, directions=cfg.directions)
    study.set_user_attr("config", cfg.to_dict())
    other = config.from_dict({"study": {"name": "old", "storage": cfg.study.storage},
                              "objectives": ["val_accuracy", {"metric": "val_loss", "direction": "minimize"}]},
                             source=str(tmp_path / "cnn.yaml"))
    with pytest.raises(ConfigError, match=r"objectives: study 'old' .* has objectives \[val_accuracy \(maximize\), "
                                          r"train_time_s \(minimize\)\], this config \[val_accuracy \(maximize\), "
                                          r"val_loss \(minimize\)\]"):
        study_mod.check_existing(other)
    study_mod.check_existing(cfg)  # the same objectives pass
