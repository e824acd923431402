"""README.md stays true: two quick-start commands, the own-training example runs, and it stays a landing page.

That every setting, command, metric and schema section is documented is checked on the generated reference
(tests/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_quick_start_is_two_commands() -> None:
    block = README.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln for ln in block.strip().splitlines() if ln.strip()]
    assert len(lines) == 2
    assert "autotune run search_spaces/cnn.yaml" in lines[0] and lines[1].endswith("pytest")
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    assert lines[1] in ci  # CI runs the README's test command verbatim


def test_readme_is_a_landing_page() -> None:
    """The manual is docs/; the README stays about 200 lines (issue 30)."""
    assert len(README.splitlines()) <= 220


def test_readme_links_resolve() -> None:
    """Relative links in README.md name files that exist (they work on GitHub as they do here)."""
    root = Path(__file__).resolve().parent.parent
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README)
    missing = [t for t in targets if not (root / t).exists()]
    assert targets and not missing, f"README links to missing files: {missing}"


def test_extras_are_pyprojects() -> None:
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    said = README.split("Extras:", 1)[1].split("(e.g.", 1)[0]
    assert set(re.findall(r"`([\w-]+)`", said)) == set(extras)


def test_error_example_is_todays_error(tmp_path: Path) -> None:
    """The README's unknown-key line is what a misspelt `study.sampler` in cnn.yaml prints today."""
    import yaml

    import autotune
    from autotune.core import ConfigError

    doc = yaml.safe_load((ROOT / "search_spaces" / "cnn.yaml").read_text())
    doc["study"]["samplr"] = doc["study"].pop("sampler", "tpe")
    (tmp_path / "cnn.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError) as e:
        autotune.load_config(tmp_path / "cnn.yaml")
    shown = next(ln for ln in README.splitlines() if "study.samplr" in ln)
    assert shown == f"error: cnn.yaml: {str(e.value).split(': ', 1)[1]}"


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


def _marked(example: str) -> tuple[int, int]:
    """The lines an example marks `# autotune` (those tuning added or changed), and those marked optional."""
    text = (Path(__file__).resolve().parent.parent / "examples" / f"{example}.py").read_text()
    lines = [ln for ln in text.splitlines() if re.search(r"(?<!`)# autotune\b", ln)]
    optional = [ln for ln in lines if "# autotune (optional)" in ln]
    return len(lines) - len(optional), len(optional)


def test_the_integration_examples_add_the_lines_readme_and_docs_say() -> None:
    docs = Path(__file__).resolve().parent.parent / "docs" / "howto"
    guide = re.search(r"hf_seqcls\.py`\),\s+adds or changes (\d+) lines \((\d+) added, (\d+) changed\)", README)
    assert guide is not None
    total, added, changed = map(int, guide.groups())
    assert _marked("hf_seqcls") == (total, 0) and added + changed == total
    hf_readme = re.search(r"hf_text\.py`: `make_trainer\(args, ctx\)`.*?adds or changes (\d+) lines \((\d+) added, "
                          r"(\d+) changed\), (\d+) more", README, re.S)
    assert hf_readme is not None
    hf_page = (docs / "hf.md").read_text()
    hf_doc = re.search(r"That is (\d+) lines of your script, (\d+) added and (\d+) changed \((\d+) more", hf_page)
    assert hf_doc is not None and hf_doc.groups() == hf_readme.groups()
    total, added, changed, optional = map(int, hf_readme.groups())
    assert _marked("hf_text") == (total, optional) and added + changed == total
    assert (hf_page.count("# + 1"), hf_page.count("# ~ 1")) == (added, changed)
    assert f"{_marked('hf_seqcls')[0]} lines" in hf_page
    lightning = re.search(r"\*\*(\d+) added lines\*\*", README)
    assert lightning is not None and _marked("lightning_backbone") == (int(lightning.group(1)), 0)
    assert _marked("digits_lightning") == (int(lightning.group(1)), 0)
    page = (docs / "lightning.md").read_text()
    assert "three lines hand them to autotune" in page and int(lightning.group(1)) == 3
    assert page.split("```python", 1)[1].split("```", 1)[0].count("# added") == 3
