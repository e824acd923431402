"""What the user hands Lightning is what runs through autotune: the DataModule itself (its transfer hooks, and
`trainer.datamodule` for a callback), with the trial's loader settings applied to the loaders it returns and its
methods restored after; one Callback object as well as a list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integrations_tests import lightning_handover as lh
from tests.support import EXAMPLES
from tests.support import lightning_trial as train

HOOKS = ("setup", "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def test_the_datamodule_is_handed_to_lightning_its_hooks_run_as_plain() -> None:
    plain = lh.plain(epochs=2)
    plain_sizes = lh.SEEN.pop("val_sizes")
    train(lh.fit_datamodule)  # (epochs 2 chosen, nothing else)
    through: Any = lh.SEEN["data"]
    assert {h: through.calls[h] for h in HOOKS} == {h: plain.calls[h] for h in HOOKS}
    assert plain.calls["transfer_batch_to_device"] > 0
    assert lh.SEEN["val_sizes"] == plain_sizes == [200, 200]  # the callback read trainer.datamodule
    assert "train_dataloader" not in vars(through) and "val_dataloader" not in vars(through)


def test_a_searched_batch_size_shapes_the_datamodules_loader_and_its_methods_are_restored() -> None:
    res = train(lh.fit_datamodule, batch_size=25, eval_batch_size=40)
    data: Any = lh.SEEN["data"]
    assert lh.SEEN["train_batch_size"] == 25
    assert data.calls["transfer_batch_to_device"] > 0 and data.calls["setup"] == 1
    assert data.train_dataloader().batch_size == 50 and data.val_dataloader().batch_size == 100  # (restored)
    assert res.not_applied == {}


def test_one_callback_object_works_as_a_list() -> None:
    train(lh.fit_one_callback)
    assert lh.SEEN["val_sizes"] == [200, 200]


# ---------------------------------------------------------------- a setting that acts only through another


@pytest.mark.parametrize("key", ["weight_decay", "momentum"])
def test_an_optimizer_setting_without_optimizer_is_refused_at_validate_in_one_line(
        key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The module's own configure_optimizers trains unless `optimizer` is chosen: nothing would apply a searched
    weight_decay or momentum. `autotune validate` says so in one line, exit 2 (the rule HF's momentum follows)."""
    from autotune.cli import main

    monkeypatch.syspath_prepend(str(EXAMPLES))
    text = (EXAMPLES / "digits_lightning.yaml").read_text(encoding="utf-8").replace(
        "sqlite:///studies/", f"sqlite:///{tmp_path}/")
    path = tmp_path / "l.yaml"
    path.write_text(text.replace("  optimizer:        {type: categorical, choices: [adam, adamw, sgd_nesterov]}\n",
                                 f"  {key}: {{type: float, low: 0.0, high: 0.5}}\n"), encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: l.yaml: space.{key}: the Lightning integration cannot apply {key} unless optimizer is " \
                  f"chosen too: your module's own optimizer (configure_optimizers) takes no {key} from autotune; " \
                  "search or fix optimizer too (add it to space: or train:, e.g. " \
                  f"{'sgd, sgd_nesterov or rmsprop' if key == 'momentum' else 'adamw'})", err
    path.write_text(text.replace("  batch_size:", f"  {key}: {{type: float, low: 0.0, high: 0.5}}\n  batch_size:"),
                    encoding="utf-8")
    assert main(["validate", str(path)]) == 0  # (with optimizer searched: autotune's optimizer takes it)


# ---------------------------------------------------------------- LightningCLI's own defaults


def test_lightningcli_defaults_are_read_recorded_and_used() -> None:
    """trainer_defaults' max_epochs (3) and its one callback, and seed_everything_default: the trial trains 3 epochs
    with the callback (not autotune's epochs, not re-typed), the recipe says so; the CLI's seed is recorded and
    the trial trains its own (as any trial), through Lightning's seed_everything as the CLI would call it."""
    pytest.importorskip("jsonargparse")
    from autotune.spec.settings import DEFAULTS
    from autotune.training import TrainingPlan, TrialContext, run_fit, trial_session

    lh.plain_cli()
    assert lh.SEEN["val_sizes"] == [200, 200, 200]
    plain_weight = lh.SEEN["first_weight"]
    values = {**DEFAULTS, "device": "cpu"}
    ctx = TrialContext(TrainingPlan.bare(values, seed=1234, searched=(), fixed=()))
    with trial_session(values):
        res = run_fit(lh.fit_cli, ctx)
    assert lh.SEEN["val_sizes"] == [200, 200, 200]  # 3 epochs, the one callback object, trainer.datamodule
    assert lh.SEEN["first_weight"] == plain_weight  # (seed 1234 both ways: the same first weights)
    assert res.recipe["epochs"] == 3 and res.recipe["seed_everything"] == 1234
    assert res.recipe["callbacks"] == ["ReadsDataModule"]
    assert res.recipe["cli_trainer"] == {"limit_val_batches": "1", "max_epochs": "3"}
    assert len(res.history) == 3


def test_validation_sees_a_lightningcli_fit_as_lightning() -> None:
    """What validation refuses for lightning.fit (several devices, weight_decay without optimizer) it refuses for a
    fit calling tune_lightning.cli."""
    from autotune.core import adapter_mark, one_device_adapter
    from autotune.integrations.tables import LIGHTNING

    assert adapter_mark(lh.fit_cli) is LIGHTNING and one_device_adapter(lh.fit_cli) == LIGHTNING.integration


def test_a_lightningcli_argument_it_cannot_parse_fails_the_trial_not_the_process() -> None:
    """jsonargparse exits the process on a bad argument: through autotune the trial fails with a ContextMisuse."""
    pytest.importorskip("jsonargparse")
    from autotune.training import ContextMisuse

    with pytest.raises(ContextMisuse, match=r"LightningCLI could not parse its arguments \(it exited with status 2"):
        train(lh.fit_cli_bad_argument)
