"""Writes autotune/spec/settings_fields.py, the settings catalogue as types, from `SETTINGS`:

    python -m autotune.spec.settings_codegen

A type checker cannot read a dict at run time, so each setting's name and value type is written out as code: a
typed read-only attribute (`s.lr -> float`) and an `@overload` of `__getitem__` (`s["lr"] -> float`; a choice's
value is the `Literal` of its names). tests/spec_tests/test_settings_fields.py fails when the file is stale.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from autotune.spec.settings import SETTINGS, Setting

TARGET = Path(__file__).with_name("settings_fields.py")
_PLAIN = {"float": "float", "int": "int", "bool": "bool", "str": "str"}

_HEAD = '''\
"""GENERATED from the settings catalogue (`SETTINGS`, autotune/spec/settings.py) by
`python -m autotune.spec.settings_codegen`: do not edit; tests/spec_tests/test_settings_fields.py fails when stale.

Each setting as a typed read-only attribute (`s.lr -> float`) and key (`s["lr"] -> float`; a choice's value is the
`Literal` of its names), so a type checker proves every read of `Settings` (its base). Any other key (`model.KEY`)
reads as `Any`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, overload
'''


def _literal(name: str, values: tuple[str, ...]) -> str:
    body = textwrap.fill(", ".join(f'"{v}"' for v in values), width=116, initial_indent="    ",
                         subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)
    return f"{name} = Literal[\n{body},\n]\n"


def _choice_type(s: Setting) -> str:
    return "".join(part.capitalize() for part in s.name.split("_")) + "Choice"


def _value_type(s: Setting) -> str:
    return _choice_type(s) if s.kind == "choice" else _PLAIN[s.kind]


def render() -> str:
    """The text of settings_fields.py for the catalogue as it is now."""
    out = [_HEAD, "\n"]
    choices = [s for s in SETTINGS.values() if s.kind == "choice"]
    out += ["# Each choice setting's values.\n"] + [_literal(_choice_type(s), s.names) for s in choices]
    out.append("\n# The settings of each plain type, by name.\n")
    for kind, py in _PLAIN.items():
        names = tuple(s.name for s in SETTINGS.values() if s.kind == kind)
        out.append(_literal(f"{py.capitalize()}Key", names))
    out.append('\n\nclass SettingsFields(Mapping[str, Any]):\n'
               '    """The catalogue\'s settings, typed: `Settings`\' base (its values are `_values`)."""\n\n'
               '    __slots__ = ()\n'
               '    _values: Mapping[str, Any]\n\n')
    for py in _PLAIN.values():
        out.append(f"    @overload\n    def __getitem__(self, key: {py.capitalize()}Key) -> {py}: ...\n")
    for s in choices:
        out.append(f'    @overload\n    def __getitem__(self, key: Literal["{s.name}"]) -> {_choice_type(s)}: ...\n')
    out.append("    @overload\n    def __getitem__(self, key: str) -> Any: ...\n"
               "    def __getitem__(self, key: str) -> Any:\n"
               "        return self._values[key]\n")
    for s in SETTINGS.values():
        doc = s.doc.replace("\\", "\\\\").replace('"', '\\"')
        doc = textwrap.shorten(doc, width=104, placeholder=" ...")
        out.append(f'\n    @property\n    def {s.name}(self) -> {_value_type(s)}:\n'
                   f'        """{doc}"""\n'
                   f'        return self["{s.name}"]\n')
    return "".join(out)


def main() -> None:
    TARGET.write_text(render())
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
