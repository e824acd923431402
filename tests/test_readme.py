"""README.md stays true: two quick-start commands, every setting and command documented."""

from __future__ import annotations

import re
from pathlib import Path

from autotune.cli import COMMANDS
from autotune.settings import SETTINGS

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_quick_start_is_two_commands() -> None:
    block = README.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln for ln in block.strip().splitlines() if ln.strip()]
    assert len(lines) == 2
    assert "autotune run search_spaces/cnn.yaml" in lines[0] and lines[1].endswith("pytest")
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    assert lines[1] in ci  # CI runs the README's test command verbatim


def test_every_setting_documented() -> None:
    missing = [name for name in SETTINGS if not re.search(rf"\| `{name}` \|", README)]
    assert not missing, f"README lacks settings: {missing}"


def test_every_command_documented() -> None:
    missing = [name for name in COMMANDS if f"autotune {name}" not in README]
    assert not missing, f"README lacks commands: {missing}"
