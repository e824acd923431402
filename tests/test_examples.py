"""The users' examples in examples/ run end to end: their own functions, their YAML, small data."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np

import autotune
from autotune.study import open_study
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples"


def write_cifar(root: Path, per_batch: int = 16) -> Path:
    """The python-format CIFAR-10 folder the example reads: data_batch_1..5 and test_batch, images whose
    class shows in their mean colour (learnable in an epoch or two)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = rng.integers(0, 10, per_batch)
        x = np.clip(rng.normal(128, 30, (per_batch, 3, 32, 32)) + (labels[:, None, None, None] - 5) * 20, 0, 255)
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": x.astype(np.uint8).reshape(per_batch, -1), b"labels": labels.tolist()}, f)
    return folder


def run(tmp_path: Path, name: str, n_trials: int, first: list[dict], **overrides: object) -> autotune.TuneResult:
    cfg = autotune.load_config(str(EXAMPLES / f"{name}.yaml"), overrides={
        "study.storage": f"sqlite:///{tmp_path}/{name}.db", "study.n_trials": n_trials, **overrides})
    study = open_study(cfg)
    for params in first:
        study.enqueue_trial(params)
    return autotune.run(cfg)


def test_cifar_resnet_example(tmp_path: Path) -> None:
    folder = write_cifar(tmp_path)
    small = {"compile": False, "precision": "fp32", "batch_size": 128, "user.width": 16}  # seconds on a CPU
    res = run(tmp_path, "cifar_resnet", 2, [small, {**small, "channels_last": True, "user.width": 32}],
              **{"train.epochs": 2, "train.user.data_dir": str(folder)})
    trials = res.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"], [t.user_attrs for t in trials]
    assert all(len(t.user_attrs["history"]) == 2 and 0 <= t.values[0] <= 1 for t in trials)
    assert trials[1].user_attrs["model_params"] > 3 * trials[0].user_attrs["model_params"]  # width 32 vs 16


def test_char_gru_example_reports_perplexity(tmp_path: Path) -> None:
    res = run(tmp_path, "char_gru", 2, [{"user.hidden": 32, "user.layers": 1, "batch_size": 32}],
              **{"train.epochs": 2})
    done = [t for t in res.study.trials if t.state.name == "COMPLETE"]
    assert done, [t.user_attrs for t in res.study.trials]
    for t in done:
        ppl = [h["val_perplexity"] for h in t.user_attrs["history"]]
        assert t.values[0] == ppl[-1] and ppl[-1] < 56  # better than a uniform guess over the 56 characters


def test_diabetes_example_from_the_command_line_elsewhere(tmp_path: Path) -> None:
    """`autotune run examples/diabetes_mae.yaml` from another folder: the module next to the YAML is found."""
    proc = subprocess.run([sys.executable, "-m", "autotune", "run", str(EXAMPLES / "diabetes_mae.yaml"), "--plain",
                           "--n-trials", "3", "--storage", f"sqlite:///{tmp_path}/d.db"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Recommended configuration" in proc.stdout and "val_mae" in proc.stdout
    import optuna

    study = optuna.load_study(study_name="diabetes-mae", storage=f"sqlite:///{tmp_path}/d.db")
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert done and all(0 < t.values[0] < 200 for t in done)  # MAE in the target's units (std about 77)
