"""The LitMNIST port (examples/lightning_litmnist.py: Lightning's hello-world tutorial module on digits, its data
hooks on the module itself, `trainer.fit(model)` with no DataModule) runs a study through autotune: the module's
own train_dataloader rebuilt at a searched batch size, its Adam and 3 epochs the recipe. `-m slow`: a plain run
(the script's main()) and the same seed through autotune reach the same accuracy (bench/recipe_parity.py --only
litmnist runs it over seeds)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("lightning")
pytest.importorskip("torchmetrics")

from tests.support import EXAMPLES  # noqa: E402
from tests.support import example_study as _study  # noqa: E402
from tests.support import plain_example as _plain  # noqa: E402


def test_the_litmnist_port_is_the_tutorials_module_plus_three_lines() -> None:
    text = (EXAMPLES / "lightning_litmnist.py").read_text(encoding="utf-8")
    marked = [ln for ln in text.splitlines() if re.search(r"(?<!`)# autotune\b", ln)]
    assert len(marked) == 3, marked  # the import, def fit(ctx), tune_lightning.fit(...)


def test_the_litmnist_port_study_trains_the_modules_own_loaders(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    res = _study(tmp_path, monkeypatch, "lightning_litmnist",
                 [{"optimizer": "adam", "lr": 2e-3, "batch_size": 128, "user.hidden_size": 32}, {}],
                 space={"optimizer": {"type": "categorical", "choices": ["adam"]},
                        "lr": {"type": "float", "low": 2e-4, "high": 2e-2, "log": True},
                        "batch_size": {"type": "categorical", "choices": [64, 128]},
                        "user.hidden_size": {"type": "categorical", "choices": [32, 64]}})
    first = res.study.trials[0]
    assert first.state.name == "COMPLETE", first.user_attrs
    assert len(first.user_attrs["history"]) == 3 and 0 <= first.values[0] <= 1  # its max_epochs 3
    recipe = first.user_attrs["recipe"]
    recipe = json.loads(recipe) if isinstance(recipe, str) else recipe
    assert recipe["eval_batch_size"] == 64 and recipe["epochs"] == 3  # the module's val_dataloader, its epochs
    assert json.loads(first.user_attrs.get("not_applied", "{}") or "{}") == {}


@pytest.mark.slow
def test_the_litmnist_port_plain_and_through_autotune_reach_the_same_accuracy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = ("import lightning as L\nL.seed_everything(42)\nt = s.main()\nprint(float(t.callback_metrics['val_acc']))")
    plain = _plain("lightning_litmnist", code, tmp_path)
    (t,) = _study(tmp_path, monkeypatch, "lightning_litmnist", [{}],
                  **{"space": {}, "study.trial_seed": 42}).study.trials
    print(f"\nlightning_litmnist: plain {plain:.4f}, through autotune {t.values[0]:.4f}")
    assert abs(plain - t.values[0]) <= 0.02
