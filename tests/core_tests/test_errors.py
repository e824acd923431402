"""errors.py: the one shape of a user mistake, close-match suggestions, and where a user's code raised."""

from __future__ import annotations

import pytest

from autotune.core.errors import STOP_REASONS, ConfigError, TrialStopped, describe_exception, one_of, suggest


def test_config_error_names_file_key_and_rule_and_hides_passwords() -> None:
    e = ConfigError("cnn.yaml", "space.lr.low", "must be > 0 when log is true; got 0.0")
    assert str(e) == "cnn.yaml: space.lr.low: must be > 0 when log is true; got 0.0"
    assert str(ConfigError(None, "", "empty file")) == "<config>: empty file"
    secret = ConfigError("s.yaml", "study.storage", "cannot reach postgresql://me:hunter2@db/x?password=hunter2")
    assert "hunter2" not in str(secret) and "postgresql://me:***@db/x?password=***" in str(secret)


def test_suggest_and_one_of() -> None:
    assert suggest("optimiser", ["optimizer", "lr"]) == " (did you mean 'optimizer'?)"
    assert suggest("zzz", ["optimizer", "lr"]) == ""
    assert one_of(["tpe", "grid", "random"]) == "allowed: grid, random, tpe"


def test_trial_stopped_takes_only_known_reasons() -> None:
    e = TrialStopped("slow", 3, "projected 9.0s > 5s")
    assert (e.reason, e.epoch, str(e)) == ("slow", 3, "slow at epoch 3: projected 9.0s > 5s")
    assert "diverged" in STOP_REASONS
    with pytest.raises(ValueError, match="unknown stop reason 'tired'"):
        TrialStopped("tired", 1)


def _users_code() -> None:
    shards = {"a": 1}
    shards["b"]  # noqa: B018 - the user's bug, on this line


def test_describe_exception_points_at_the_users_line() -> None:
    try:
        _users_code()
    except KeyError as e:
        text = describe_exception(e)
    line = _users_code.__code__.co_firstlineno + 2
    assert text == f"KeyError: 'b' (at test_errors.py:{line} in _users_code)"
    assert describe_exception(ValueError("word " * 100), limit=20) == "ValueError: word..."  # cut at a word
    long = describe_exception(ValueError("x" * 500), limit=20)
    assert len(long) <= 20 and long.endswith("...")
