"""`best --export` runs the exported trial again, at its seed, even after an earlier attempt of the exported file
failed (the re-run's trial is then number 1, and trial n used to train `trial_seed + n`: another seed, silently).
Issue 49."""

from __future__ import annotations

from pathlib import Path

import pytest

import autotune
from autotune import config
from autotune.fit import trial_seed
from autotune.observe import export
from autotune.search import results

FIT = '''
import os
import torch
from torch import nn

g = torch.Generator().manual_seed(0)
X = torch.randn(256, 8, generator=g)
Y = (X[:, 0] + 0.5 * X[:, 1] > 0).long()


def fit(ctx):
    if os.path.exists(os.environ["EXPORT_RERUN_BROKEN"]):
        raise RuntimeError("the data share is not mounted")
    model, _ = ctx.prepare(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2)))
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        model.train()
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        model.eval()
        with torch.no_grad():
            ctx.report(val_loss=float(nn.functional.cross_entropy(model(X), Y)))
'''


def test_an_export_rerun_after_a_failed_attempt_trains_the_exported_trials_seed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    broken = tmp_path / "broken"
    monkeypatch.setenv("EXPORT_RERUN_BROKEN", str(broken))
    (tmp_path / "rerun_fit.py").write_text(FIT, encoding="utf-8")
    (tmp_path / "rerun.yaml").write_text(
        "study: {name: rerun, storage: 'sqlite:///rerun.db', n_trials: 3, sampler: random}\n"
        "trainer: rerun_fit:fit\n"
        "objectives: [{metric: val_loss, direction: minimize}]\n"
        "train: {epochs: 2, device: cpu, cpu_threads: 1, batch_size: 32, optimizer: adam}\n"
        "space: {lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}}\n", encoding="utf-8")
    cfg = autotune.load_config(str(tmp_path / "rerun.yaml"))
    trials = autotune.run(cfg).study.trials
    original = trials[2]  # (its seed, 2, is no re-run's trial number)
    assert original.state.name == "COMPLETE" and original.user_attrs["seed"] == 2
    path = export.export_best(cfg, results.summarize(original, ["val_loss"]), tmp_path / "best.yaml")

    broken.touch()  # the first attempt of the exported file fails
    exported = config.load(str(path))
    first = autotune.run(exported).study.trials
    assert [t.state.name for t in first] == ["FAIL"]
    broken.unlink()  # the same file again, on the same storage: the study goes on with its trial 1
    again = autotune.run(exported).study.trials
    assert [t.state.name for t in again] == ["FAIL", "COMPLETE"]
    assert again[1].user_attrs["seed"] == original.user_attrs["seed"] == 2  # (it trained 3)
    assert again[1].values == original.values  # exactly: the same settings at the same seed
    assert again[1].user_attrs["history"][0]["train_loss"] == original.user_attrs["history"][0]["train_loss"]


def test_a_study_of_several_trials_still_gives_each_its_own_seed() -> None:
    """The rule for one trial does not touch a study of several: trial n trains trial_seed + n."""
    cfg = config.from_dict({"study": {"trial_seed": 41, "n_trials": 3}})
    assert [trial_seed(cfg, n) for n in range(3)] == [41, 42, 43]
    one = config.from_dict({"study": {"trial_seed": 41, "n_trials": 1}})
    assert [trial_seed(one, n) for n in range(3)] == [41, 41, 41]
