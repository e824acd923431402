"""The documentation site stays true: the generated reference covers every setting, metric, command and schema
section, and `mkdocs build --strict` (what .ci/run runs) passes: no broken link, no page left out of the nav."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {path: build() for path, build in _hook().PAGES.items()}


def test_every_setting_in_the_reference(pages: dict[str, str]) -> None:
    from autotune.spec.settings import SETTINGS

    missing = [name for name in SETTINGS if f"| `{name}` |" not in pages["reference/settings.md"]]
    assert not missing, f"the settings reference lacks: {missing}"


def test_every_stored_attr_in_the_reference(pages: dict[str, str]) -> None:
    import dataclasses

    from autotune.spec import StudyRecord, TrialRecord

    names = [f.name for record in (TrialRecord, StudyRecord) for f in dataclasses.fields(record)]
    missing = [name for name in names if f"| `{name}` |" not in pages["reference/stored.md"]]
    assert not missing and all(f.metadata.get("doc") for r in (TrialRecord, StudyRecord)
                               for f in dataclasses.fields(r)), f"the stored-attrs reference lacks: {missing}"


def test_every_metric_in_the_reference(pages: dict[str, str]) -> None:
    from autotune.spec.metrics import CATALOGUE

    missing = [name for name in CATALOGUE if f"| `{name}` |" not in pages["reference/metrics.md"]]
    assert not missing, f"the metrics reference lacks: {missing}"


def test_every_command_and_argument_in_the_reference(pages: dict[str, str]) -> None:
    import argparse

    from autotune.cli.app import COMMANDS, build_parser

    page = pages["reference/cli.md"]
    assert not [name for name in COMMANDS if f"## autotune {name}\n" not in page]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    flags = {flag for name in COMMANDS for action in sub.choices[name]._actions for flag in action.option_strings}
    assert not [flag for flag in flags if f"`{flag}" not in page and flag not in page]


def test_every_schema_section_and_key_in_the_reference(pages: dict[str, str]) -> None:
    from autotune.spec.schema import RunConfig

    page = pages["reference/yaml.md"]
    for name, field in RunConfig.model_fields.items():
        if not field.exclude:
            assert f"| `{name}` |" in page, name
    for section in ("study", "study.warm_start", "objectives", "data", "model", "pruning", "pruning.slow",
                    "constraints", "distill", "tracking", "tracking.mlflow", "space.<setting>"):
        assert f"## `{section}`" in page, section
    assert "| `n_trials` | int \\| null | `30` | >= 1 |" in page  # type, default and bound from the model


def test_api_reference_from_docstrings(pages: dict[str, str]) -> None:
    import inspect

    import autotune

    page = pages["reference/api.md"]
    for name in ("load_config", "run", "train"):
        assert f"autotune.{name}(" in page and inspect.cleandoc(getattr(autotune, name).__doc__) in page
    for name in ("TuneResult", "TrainResult", "TrialContext"):
        assert f"### `{name}`" in page
    for method in ("prepare", "loader", "epochs", "autocast", "backward", "report"):
        assert f"`TrialContext.{method}(" in page


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """The site builds with every link resolved (a few seconds)."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    assert mkdocs, "mkdocs is not installed: it is in the test extra (pip install -e '.[test]')"
    proc = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr
    for page in ("reference/settings", "reference/cli", "reference/api", "design", "guide/own-training"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def test_no_page_loads_anything_from_a_network() -> None:
    """The documentation reads offline, as autotune's reports do: a page's scripts, styles and images come from files
    beside it (a figure's plotly.js too), never from a CDN."""
    import re

    for page in sorted((ROOT / "docs").rglob("*.html")) + sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for tag, src in re.findall(r"<(script|link|img|iframe)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"", text):
            assert not re.match(r"(https?:)?//", src), f"{page.relative_to(ROOT)}: <{tag}> loads {src}"
            if not src.startswith(("#", "data:")):
                assert (page.parent / src.split("?")[0]).exists(), f"{page.relative_to(ROOT)}: {src} is not there"


# ---------------------------------------------------------------- lists of settings and names in the prose

DOCS = ROOT / "docs"


def _md(path: str) -> str:
    return (DOCS / path).read_text(encoding="utf-8")


def _code_names(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def test_every_generated_list_in_the_docs_is_what_the_code_gives() -> None:
    """`<!-- names: KEY -->...<!-- /names -->`: what the page says (its GitHub view) is the hook's list, which the
    build fills afresh."""
    hook = _hook()
    seen = set()
    for page in sorted(DOCS.rglob("*.md")):
        for key, written in hook.NAME_LIST.findall(page.read_text(encoding="utf-8")):
            seen.add(key)
            assert _code_names(written) == hook.NAME_LISTS[key](), f"{page.relative_to(ROOT)}: names {key}"
        assert hook.filled(page.read_text(encoding="utf-8")).count("<!-- /names -->") == \
            page.read_text(encoding="utf-8").count("<!-- /names -->")
    assert seen == set(hook.NAME_LISTS), f"lists no page uses: {set(hook.NAME_LISTS) - seen}"


def test_a_generated_list_is_refilled_at_build_time() -> None:
    hook = _hook()
    page = "(<!-- names: neutral -->`channels_last`, `no_such_setting`<!-- /names -->)"
    assert _code_names(hook.filled(page)) == hook.NAME_LISTS["neutral"]()


# which call of the "What the context owns" table applies each part of the context (the catalogue's applied_by)
CALLS = {"`ctx.prepare(": ("prepare", "optimizer"), "`ctx.loader(": ("loader", "dataloader"),
         "`ctx.epochs(": ("epochs", "stop", "clock"), "`ctx.autocast(": ("autocast",),
         "`ctx.backward(": ("step", "schedule"), "around the call": ("around",)}


def test_the_context_table_names_every_setting_each_call_applies() -> None:
    """Each call's row names every setting the catalogue says its part applies (`applied_by`), and ctx.report's
    every per-epoch clock of the metrics catalogue."""
    from autotune.spec.metrics import CATALOGUE
    from autotune.spec.settings import SETTINGS, applied_by

    table = _md("guide/own-training.md").split("## What the context owns", 1)[1].split("\n\n## ", 1)[0]
    rows = {call: next(line for line in table.splitlines() if line.startswith(f"| {call}")) for call in CALLS}
    for call, parts in CALLS.items():
        missing = [k for k in applied_by(*parts) if f"`{k}`" not in rows[call]]
        assert not missing, f"guide/own-training.md: the {call} row does not name {missing} (applied_by {parts})"
    report = next(line for line in table.splitlines() if line.startswith("| `ctx.report("))
    clocks = [m.name for m in CATALOGUE.values() if m.per_epoch and m.source == "clock" and f"`{m.name}`" not in report]
    assert not clocks, f"guide/own-training.md: the ctx.report row does not name the clocks {clocks}"
    # every other part is the built-in trainer's (a new part of the context needs its row here and in the table)
    context_parts = {p for parts in CALLS.values() for p in parts}
    assert {s.applied_by for s in SETTINGS.values()} - context_parts == {"loss", "model", "augment", "eval",
                                                                            "checkpoint", "after"}


def test_the_compression_table_is_the_catalogues() -> None:
    from autotune.spec.settings import BUILTIN_ONLY, SETTINGS

    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", _md("howto/compression.md"), flags=re.M)
    assert [name for name, _ in rows] == list(BUILTIN_ONLY)
    for name, default in rows:
        value = SETTINGS[name].default
        assert default == (str(value).lower() if isinstance(value, bool) else str(value)), name


def _comment_list(block: str, start: str) -> set[str]:
    """The names a `# a | b | c` comment lists, on the line matching `start` and the comment lines under it."""
    lines = block.splitlines()
    i = next(n for n, line in enumerate(lines) if re.match(start, line))
    text = [lines[i].split("#", 1)[1]]
    for line in lines[i + 1:]:
        if not line.strip().startswith("#"):
            break
        text.append(line.strip().lstrip("#"))
    runs = re.findall(r"[\w-]+(?:\s*\|\s*[\w-]+)+", " ".join(text))
    return {name.strip() for run in runs for name in run.split("|")}


def test_the_yaml_tours_name_lists_are_the_registries() -> None:
    from autotune.spec import STRATEGIES
    from autotune.spec.metrics import CATALOGUE
    from autotune.spec.names import DATASET_NAMES, MODEL_NAMES, PRUNER_NAMES, SAMPLER_NAMES

    page = _md("guide/yaml.md")
    block = page.split("```yaml", 1)[1].split("```", 1)[0]
    for start, names in ((r"  sampler:", SAMPLER_NAMES), (r"  name: digits", DATASET_NAMES),
                         (r"  name: cnn", MODEL_NAMES), (r"  pruner:", PRUNER_NAMES), (r"  strategy:", STRATEGIES)):
        assert _comment_list(block, start) == set(names), f"guide/yaml.md: the list at {start.strip()!r}"
    objectives = page.split("Objective metrics:", 1)[1].split("\n\n", 1)[0]
    missing = [m.name for m in CATALOGUE.values() if m.objective and f"`{m.name}`" not in objectives]
    assert not missing, f"guide/yaml.md's objective metrics lack {missing}"
