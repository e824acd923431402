"""The users' examples in examples/ run end to end: their own functions, their YAML, small data."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support import EXAMPLES
from tests.support import run_example as run


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


@pytest.mark.slow
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


def test_groups_sgd_example_keeps_its_groups_and_leaves_the_loader_early(tmp_path: Path) -> None:
    """airbench's shape: two groups at 64x, its own LambdaLR, a `break` at its step count, TTA evaluation."""
    first = [{"lr": 0.5, "batch_size": 64, "precision": "fp32", "channels_last": False, "label_smoothing": 0.1,
              "user.width": 8}, {"lr": 2.0, "batch_size": 128, "precision": "fp32", "channels_last": True,
                                 "label_smoothing": 0.0, "user.width": 8}]
    res = run(tmp_path, "groups_sgd", 2, first, **{"train.epochs": 2})
    trials = res.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"], [t.user_attrs for t in trials]
    for t, params in zip(trials, first):
        assert t.user_attrs["group_lr_ratio"] == 64.0  # the searched lr scaled both groups alike
        assert "lr" not in t.user_attrs.get("not_applied", {}) and "label_smoothing" not in \
            t.user_attrs.get("not_applied", {})
        n_train = int(1797 * 0.8)
        steps = max(1, int(0.9 * (n_train // params["batch_size"] + (n_train % params["batch_size"] > 0))))
        for h in t.user_attrs["history"]:  # samples counted from the steps taken, not the whole loader
            assert abs(h["samples_per_s"] * h["epoch_time_s"] - steps * params["batch_size"]) <= params["batch_size"]
    assert max(t.values[0] for t in trials) > 0.5


def test_own_batches_example_counts_its_own_samples(tmp_path: Path) -> None:
    """nanoGPT's shape: batches of its own (no ctx.loader), n_samples given to ctx.backward."""
    first = [{"batch_size": 32, "precision": "fp32", "grad_clip": 1.0, "user.max_lr": 1e-2, "user.embed": 16,
              "user.hidden": 64}]
    res = run(tmp_path, "own_batches", 1, first, **{"train.epochs": 2, "train.user.iters_per_epoch": 20})
    (t,) = res.study.trials
    assert t.state.name == "COMPLETE", t.user_attrs
    for h in t.user_attrs["history"]:
        assert h["samples_per_s"] > 0
        assert abs(h["samples_per_s"] * h["epoch_time_s"] - 20 * 32) < 1e-6 * 20 * 32 + 1
    assert t.values[0] < math.log(56)  # better than a uniform guess over the text's characters
    assert "grad_clip" not in t.user_attrs.get("not_applied", {})


def test_final_only_example_reports_at_the_end_and_says_pruning_is_off(tmp_path: Path) -> None:
    """pytorch/examples mnist's shape: Adadelta + StepLR of its own, len(loader.dataset), one final test."""
    first = [{"lr": 1.0, "batch_size": 64, "precision": "fp32", "user.gamma": 0.7, "user.width": 8}]
    res = run(tmp_path, "final_only", 1, first, **{"train.epochs": 2, "train.user.log_interval": 5})
    (t,) = res.study.trials
    assert t.state.name == "COMPLETE", t.user_attrs
    assert 0.5 < t.values[0] <= 1.0 and t.user_attrs["test_loss"] > 0
    assert "test_accuracy" in t.user_attrs["pruning_off"]
    assert "lr" not in t.user_attrs.get("not_applied", {})


def test_word_lm_port_trains_exactly_what_the_plain_program_trains(tmp_path: Path) -> None:
    """pytorch/examples' word_language_model through `fit(ctx)`: with nothing searched, trial 0 (trial_seed: the
    program's default seed, 1111) reports the validation losses the program's own `main` computes, to the bit
    (2 epochs; the second seed and 3 epochs were measured the same way: docs/guide/own-training.md)."""
    code = ("import sys; sys.argv = ['word_lm.py', '--epochs', '2']; import word_lm; seen = []; "
            "ev = word_lm.evaluate; word_lm.evaluate = lambda *a: seen.append(ev(*a)) or seen[-1]; word_lm.main(); "
            "print(repr(seen))")
    plain = subprocess.run([sys.executable, "-c", code], cwd=EXAMPLES, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    res = run(tmp_path, "word_lm", 1, [], **{"space": {}, "train.epochs": 2, "train.device": "cpu",
                                             "train.cpu_threads": 1})
    (t,) = res.study.trials
    assert t.state.name == "COMPLETE" and t.user_attrs["seed"] == 1111, t.user_attrs
    assert [h["val_loss"] for h in t.user_attrs["history"]] == eval(plain.stdout.splitlines()[-1])
    assert [h["lr"] for h in t.user_attrs["history"]] == [20.0, 20.0]


def _bf16_lstm_runs() -> bool:
    """Whether this CPU's torch runs an LSTM under bf16 autocast (oneDNN has no bf16 LSTM primitive on some CPUs)."""
    import torch

    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.LSTM(4, 4)(torch.randn(2, 1, 4))
    except RuntimeError:
        return False
    return True


def test_word_lm_port_searches_its_space(tmp_path: Path) -> None:
    if not _bf16_lstm_runs():
        pytest.skip("this CPU's torch has no bf16 LSTM (oneDNN: no primitive descriptor): the port's bf16 trial "
                    "would fail in the user's own forward")
    res = run(tmp_path, "word_lm", 1, [{"lr": 0.5, "precision": "bf16"}],
              **{"train.epochs": 2, "train.device": "cpu"})
    (t,) = res.study.trials
    assert t.state.name == "COMPLETE", t.user_attrs
    assert t.user_attrs["history"][0]["lr"] == 10.0  # the searched lr multiplied the fit's own SGD lr (20)
    assert math.isclose(t.user_attrs["history"][-1]["val_ppl"], math.exp(t.values[0]), rel_tol=1e-9)
