"""README.md stays true: two quick-start commands, every setting and command documented."""

from __future__ import annotations

import re
from pathlib import Path

from autotune.cli.app import COMMANDS
from autotune.spec.settings import SETTINGS

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


def test_own_training_example_runs(tmp_path: Path) -> None:
    """The "Tune your own training" example, as written: its Python file and YAML, run from the YAML's folder."""
    import subprocess
    import sys

    section = README.split("## Tune your own training", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    space = section.split("```yaml", 1)[1].split("```", 1)[0]
    (tmp_path / "my_fit.py").write_text(code)
    (tmp_path / "my_space.yaml").write_text(space + "study: {n_trials: 3, storage: 'sqlite:///own.db'}\n")
    proc = subprocess.run([sys.executable, "-m", "autotune", "run", "my_space.yaml", "--plain"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "3 trials in the study" in proc.stdout and "val_f1" in proc.stdout
