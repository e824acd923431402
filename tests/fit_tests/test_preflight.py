"""The pre-run check (fit/checks.py): what the data's size rules out before any trial trains."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from autotune.core.errors import ConfigWarning
from autotune.fit.checks import preflight
from tests.support import tiny


@pytest.mark.parametrize("spec", [
    {"type": "categorical", "choices": [64, 4096]},
    {"type": "int", "low": 64, "high": 4096, "log": True},
])
def test_searched_batch_sizes_past_the_training_set_warn(spec: dict, tmp_path: Path) -> None:
    cfg = tiny(tmp_path, space={"batch_size": spec})
    with pytest.warns(ConfigWarning, match=r"^tiny\.yaml: space\.batch_size: 4096 larger than the training set "
                                           r"\(1437 samples\): a trial that samples it trains on one short batch"):
        preflight(cfg)


def test_batch_sizes_that_fit_say_nothing(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, space={"batch_size": {"type": "categorical", "choices": [64, 1437]}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        preflight(cfg)


def test_the_default_batch_size_past_a_tiny_training_set_warns_and_trains_the_whole_set(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An image folder of 48 pictures (36 to train on) with the default batch size 64: a warning, not a refusal
    (today: `train.batch_size: 64 is larger than the training set`, exit 2), and each epoch trains on all 36."""
    from autotune.cli import app as cli
    from tests.support import write_folder

    root = write_folder(tmp_path / "pics", n=16)  # 3 classes x 16
    path = tmp_path / "pics.yaml"
    path.write_text(f"study: {{name: p, storage: 'sqlite:///{tmp_path}/p.db', n_trials: 1}}\n"
                    f"data: {{name: image_folder, path: {root}, cache_dir: {tmp_path / 'cache'}, val_fraction: 0.25}}\n"
                    "model: {name: mlp, hidden: 8}\ntrain: {epochs: 1, device: cpu}\n")
    assert cli.main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert "warning: pics.yaml: train.batch_size: 64 (the default) is larger than the training set (36 samples): " \
           "each epoch trains on all 36 samples as one batch; set train.batch_size to choose" in err
    assert cli.main(["run", str(path), "--plain"]) == 0
    import optuna

    (t,) = optuna.load_study(study_name="p", storage=f"sqlite:///{tmp_path}/p.db").trials
    assert t.state.name == "COMPLETE", t.user_attrs
    assert t.user_attrs["history"][0]["samples_per_s"] > 0


def test_a_batch_larger_than_the_data_keeps_its_one_batch_with_drop_last() -> None:
    """A compiled trial's training loader drops its last short batch: not when it is the only one."""
    import torch

    from autotune.spec.settings import DEFAULTS
    from autotune.training.context.collective import Alone
    from autotune.training.context.loaders import build

    data = torch.utils.data.TensorDataset(torch.randn(36, 4), torch.zeros(36, dtype=torch.long))
    batches = build(data, 64, True, True, True, {}, {**DEFAULTS, "data_on_device": False, "device": "cpu"},
                    torch.device("cpu"), 0, {}, Alone())
    assert [len(x) for x, _ in batches] == [36]
