"""The pre-run check (fit/checks.py): what the data's size rules out before any trial trains."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from autotune.core.errors import ConfigWarning
from autotune.fit.checks import preflight
from tests.conftest import tiny


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
