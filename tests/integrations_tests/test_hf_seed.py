"""The Hugging Face `TrainingArguments.seed` the user set is the recipe's: read, used by the Trainer (its data
order, dropout, a `model_init`'s weights), and recorded in the trial's `recipe`; never silently replaced. A seed the
user left to the Trainer's default is the trial's own (`seed`, which the record holds). Issue 49."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import TrainingArguments  # noqa: E402

from autotune.integrations import hf  # noqa: E402
from autotune.spec.settings import DEFAULTS  # noqa: E402
from autotune.training import TrainingPlan, TrialContext, TrialPort  # noqa: E402


def _port(seed: int) -> TrialPort:
    return TrialPort(TrialContext(TrainingPlan.bare({**DEFAULTS, "device": "cpu"}, seed=seed, searched=["lr"])))


def _args(tmp_path: Path, **given: Any) -> TrainingArguments:
    return TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **given)


def test_the_users_seed_trains_and_is_recorded_in_the_recipe(tmp_path: Path) -> None:
    port = _port(seed=3)
    args, _ = hf.trial_arguments(port, _args(tmp_path, seed=1234))
    assert args.seed == 1234  # (it was replaced by the trial's 3)
    assert port.applied.recipe["seed"] == 1234


def test_a_make_trainers_explicit_seed_even_at_the_default_is_the_users(tmp_path: Path) -> None:
    """With make_trainer, `given` names the keywords the user passed: seed=42 is theirs though it is HF's default."""
    port = _port(seed=3)
    args, _ = hf.trial_arguments(port, _args(tmp_path, seed=42), given={"output_dir", "seed"})
    assert args.seed == 42 and port.applied.recipe["seed"] == 42


def test_a_seed_left_to_the_default_is_the_trials(tmp_path: Path) -> None:
    port = _port(seed=3)
    args, _ = hf.trial_arguments(port, _args(tmp_path))
    assert args.seed == 3 and "seed" not in port.applied.recipe
    assert args.output_dir == str(tmp_path / "seed-3")  # (each trial its own folder, by the trial's seed)
