"""environ.setenv: variables set for one block, then each back to its value or unset."""

from __future__ import annotations

import os

import pytest

from autotune.core import environ


def test_setenv_restores_set_and_unset_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_T_KEEP", "user")
    monkeypatch.delenv("AUTOTUNE_T_NEW", raising=False)
    with environ.setenv({"AUTOTUNE_T_KEEP": "1", "AUTOTUNE_T_NEW": "2"}):
        assert os.environ["AUTOTUNE_T_KEEP"] == "1" and os.environ["AUTOTUNE_T_NEW"] == "2"
    assert os.environ["AUTOTUNE_T_KEEP"] == "user" and "AUTOTUNE_T_NEW" not in os.environ
    with pytest.raises(RuntimeError), environ.setenv({"AUTOTUNE_T_NEW": "3"}):
        raise RuntimeError  # restored on the way out of an error too
    assert "AUTOTUNE_T_NEW" not in os.environ
