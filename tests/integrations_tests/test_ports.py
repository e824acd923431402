"""The two ports of public examples in examples/ (issue 41), tuned as users would tune them: the Transformers guide's
text classification (hf_seqcls.py: a module-level model and Trainer handed to hf.trainer_fit) and Lightning's
backbone image classifier (lightning_backbone.py). Each study runs, each trial keeps the script's recipe where the
study does not choose, and each port adds the lines it says; `-m slow`: a plain run and the same settings through
autotune reach the same accuracy (bench/recipe_parity.py runs that over seeds)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("lightning")

from autotune.core import ConfigError  # noqa: E402
from tests.support import ROOT  # noqa: E402
from tests.support import example_study as _study  # noqa: E402
from tests.support import plain_example as _plain  # noqa: E402

EXAMPLES = ROOT / "examples"


def _marked(example: str) -> list[str]:
    text = (EXAMPLES / f"{example}.py").read_text(encoding="utf-8")
    return [ln for ln in text.splitlines() if re.search(r"(?<!`)# autotune\b", ln)]


def test_the_hf_port_is_the_guides_script_plus_four_lines() -> None:
    lines = _marked("hf_seqcls")
    assert len(lines) == 4, lines  # the import, fit = hf.trainer_fit(trainer), the __main__ guard, train() under it
    assert any("hf.trainer_fit(trainer)" in ln for ln in lines)


def test_the_lightning_port_is_lightnings_example_plus_three_lines() -> None:
    lines = _marked("lightning_backbone")
    assert len(lines) == 3, lines  # the import, def fit(ctx), tune_lightning.fit(...)


def test_the_hf_port_study_keeps_the_guides_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = _study(tmp_path, monkeypatch, "hf_seqcls", [{"lr": 3e-3, "batch_size": 32, "precision": "fp32"},
                                                      {"lr": 3e-3, "batch_size": 64, "precision": "bf16"}],
                 **{"train.epochs": 2})
    trials = res.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"], [t.user_attrs for t in trials]
    assert all(t.values[0] > 0.6 for t in trials), [t.values for t in trials]
    recipe = trials[0].user_attrs["recipe"]
    assert recipe["lr_schedule"] == "linear" and recipe["eval_batch_size"] == 16 and recipe["grad_clip"] == 1.0
    assert recipe["optimizer"].startswith("adamw_torch") and recipe["weight_decay"] == 0.01
    for t in trials:  # each trial checkpoints into its own folder (save_strategy epoch, as the guide saves)
        assert list((tmp_path / "runs" / "hf_seqcls" / f"seed-{t.user_attrs['seed']}").glob("checkpoint-*"))


def test_the_lightning_port_study_trains_bf16_with_clipping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = {"optimizer": "adam", "lr": 3e-3, "batch_size": 32, "precision": "bf16", "grad_clip": 1.0}
    res = _study(tmp_path, monkeypatch, "lightning_backbone", [first, {**first, "precision": "fp32"}],
                 **{"train.epochs": 3})
    trials = res.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"], [t.user_attrs for t in trials]
    assert all(t.values[0] > 0.3 and len(t.user_attrs["history"]) == 3 for t in trials)
    assert "not_applied" not in trials[0].user_attrs
    recipe = trials[0].user_attrs["recipe"]
    assert recipe["weight_decay"] == 0.0 and recipe["eval_batch_size"] == 32 and "lr" not in recipe


def test_the_lightning_port_named_with_autotunes_metric_stops_naming_what_it_logs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"objectives\.0\.metric: Lightning logged no val_accuracy in the first "
                                          r"epoch's evaluation; it logged: train_loss, train_loss_epoch, valid_acc, "
                                          r"valid_loss, valid_loss_epoch, train_loss_step \(one step's value: the "
                                          r"epoch's is train_loss\), valid_loss_step \(one step's value: the epoch's "
                                          r"is valid_loss\) \(did you mean 'valid_acc'\?\)"):
        _study(tmp_path, monkeypatch, "lightning_backbone", [{"optimizer": "adam", "lr": 3e-3, "batch_size": 32,
                                                              "precision": "fp32", "grad_clip": 0.0}],
               objectives=[{"metric": "val_accuracy", "direction": "maximize"}, "train_time_s"],
               **{"train.epochs": 1})


@pytest.mark.slow
def test_the_hf_port_plain_and_through_autotune_reach_the_same_accuracy(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _plain("hf_seqcls", "import transformers\ntransformers.set_seed(42)\ns.trainer.args.seed = 42\n"
                                "s.trainer.train()\n"
                                "print(s.trainer.state.log_history[-2]['eval_accuracy'])", tmp_path)
    (t,) = _study(tmp_path, monkeypatch, "hf_seqcls", [{}], **{"space": {}, "study.trial_seed": 42}).study.trials
    print(f"\nhf_seqcls: plain {plain:.4f}, through autotune {t.values[0]:.4f}")
    assert plain > 0.9 and abs(plain - t.values[0]) <= 0.02


@pytest.mark.slow
def test_the_lightning_port_plain_and_through_autotune_reach_the_same_accuracy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = ("import lightning as L\nL.seed_everything(42)\nt = L.Trainer(max_epochs=s.MAX_EPOCHS, logger=False, "
            "enable_progress_bar=False, enable_checkpointing=False)\nt.fit(s.LitClassifier(s.Backbone()), "
            "datamodule=s.MyDataModule())\nprint(float(t.callback_metrics['valid_acc']))")
    plain = _plain("lightning_backbone", code, tmp_path)
    (t,) = _study(tmp_path, monkeypatch, "lightning_backbone", [{}],
                  **{"space": {}, "study.trial_seed": 42}).study.trials
    print(f"\nlightning_backbone: plain {plain:.4f}, through autotune {t.values[0]:.4f}")
    assert abs(plain - t.values[0]) <= 0.02
