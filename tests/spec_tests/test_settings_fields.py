"""settings_fields.py, the settings catalogue as types, is generated from `SETTINGS`: it must match it."""

from __future__ import annotations

import typing

from autotune.spec import settings_codegen, settings_fields
from autotune.spec.settings import SETTINGS, Settings


def test_generated_file_is_current() -> None:
    assert settings_codegen.TARGET.read_text() == settings_codegen.render(), (
        "autotune/spec/settings_fields.py is stale: run `python -m autotune.spec.settings_codegen`")


def test_every_setting_is_a_typed_read_only_attribute() -> None:
    s = Settings({"lr": 0.5, "optimizer": "sgd"})
    py = {"float": float, "int": int, "bool": bool, "str": str}
    for name, setting in SETTINGS.items():
        prop = getattr(settings_fields.SettingsFields, name)
        assert isinstance(prop, property) and prop.fset is None
        value = getattr(s, name)
        if setting.kind == "choice":  # the Literal of the choice's names
            alias = typing.get_type_hints(prop.fget, vars(settings_fields))["return"]
            assert typing.get_args(alias) == setting.names and value in setting.names
        else:
            assert type(value) is py[setting.kind]
    assert s.lr == 0.5 and s.optimizer == "sgd"


def test_attribute_reads_are_noted_like_key_reads() -> None:
    reads: set[str] = set()
    w = Settings().watched(reads)
    assert w.lr == w["lr"] and w.grad_clip == 0.0
    assert reads == {"lr", "grad_clip"}
