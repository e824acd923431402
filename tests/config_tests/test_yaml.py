"""YAML that would mean something other than it says, or eat the machine, is one line (config/yaml.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune import config
from autotune.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _anchors(indent: str) -> tuple[str, str]:
    """Nine levels of nine aliases each: 9**9 (387 million) strings once expanded; the last anchor's name."""
    lines = [f'{indent}a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 9):
        lines.append(f"{indent}a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines), "a8"


def _bomb(where: str) -> str:
    """A run file with a billion laughs used at `where`; the anchors live in data.kwargs (any mapping takes them)."""
    anchors, last = _anchors("    ")
    head = f"data:\n  name: digits\n  kwargs:\n{anchors}\n"
    return head + {
        "metrics": f"metrics: *{last}\n",
        "data.kwargs": "",  # the anchors alone, passed to nobody: expanded by any walk over the kwargs
        "space": f"space:\n  optimizer: {{type: categorical, choices: *{last}}}\n",
        "user key": f"trainer: user_fits:fit\ntrain:\n  user.width: *{last}\n",
        "select": f"select: *{last}\n",
    }[where]


# The bound: the child (Python + the config package, no torch) gets 1 GiB of address space and 30 s; today's
# file is refused in well under a second.
_RUN = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    from autotune.config import load
    try:
        load(sys.argv[1])
    except Exception as e:
        print(type(e).__name__, e)
""")


@pytest.mark.parametrize("where", ["metrics", "data.kwargs", "space", "user key", "select"])
def test_alias_bomb_is_refused_fast_in_bounded_memory(where: str, tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(where))
    start = time.monotonic()
    try:
        out = subprocess.run([sys.executable, "-c", _RUN, str(path)], capture_output=True, text=True, timeout=30,
                             cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a bomb in {where} was still expanding after 30 s")
    assert time.monotonic() - start < 30
    line = out.stdout.strip()
    assert line.startswith("ConfigError bomb.yaml: data.kwargs.a"), (line, out.stderr[-2000:])
    assert "aliases (*name) expand this file by" in line and "more than the 100,000 allowed" in line
    assert "\n" not in line and len(line) < 400


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("data:\n  kwargs:\n    x: &x [1, *x]\n")
    with pytest.raises(ConfigError, match=r"loop\.yaml: data\.kwargs\.x\.1: line 3: an alias refers to a value that "
                                          r"contains it"):
        config.load(path)


def test_modest_anchors_still_load(tmp_path: Path) -> None:
    """Reusing a block (and YAML's merge key overriding part of it) is what anchors are for."""
    path = tmp_path / "ok.yaml"
    path.write_text(textwrap.dedent("""
        data:
          kwargs:
            base: &base {width: 16, depth: 2}
            other: {<<: *base, depth: 3}
            many: &many [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
            more: [*many, *many, *many, *many]
        """))
    cfg = config.load(path)
    assert cfg.data.kwargs["other"] == {"width": 16, "depth": 3}
    assert cfg.data.kwargs["more"][3] == list(range(1, 11))


@pytest.mark.parametrize(("text", "key", "lines"), [
    ("study:\n  n_trials: 5\ntrain:\n  lr: 0.01\n  epochs: 2\nmodel: {name: cnn}\ntrain:\n  batch_size: 32\n",
     "train", (3, 7)),
    ("study:\n  n_trials: 5\n  seed: 1\n  n_trials: 50\n", "study.n_trials", (2, 4)),
    ("space:\n  lr:\n    type: float\n    low: 0.001\n    high: 0.1\n    low: 0.0001\n", "space.lr.low", (4, 6)),
    ("study: {name: a, name: b}\n", "study.name", (1, 1)),
    ("data:\n  kwargs:\n    sizes:\n      - {a: 1, a: 2}\n", "data.kwargs.sizes.0.a", (4, 4)),
])
def test_duplicate_keys_are_refused_with_both_lines(text: str, key: str, lines: tuple[int, int],
                                                    tmp_path: Path) -> None:
    path = tmp_path / "cnn.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert str(info.value).startswith(f"cnn.yaml: {key}: duplicate key at lines {lines[0]} and {lines[1]}"), \
        str(info.value)


# ---------------------------------------------------------------- issue 43: depth, size, keys spelled differently


@pytest.mark.parametrize("style", ["flow", "block"])
def test_deep_nesting_is_one_line_and_exit_2(style: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """3,000 levels of `[` or 1,000 levels of indented keys: PyYAML's composer would recurse past Python's limit and
    print a RecursionError traceback."""
    from autotune.cli import app as cli

    path = tmp_path / "deep.yaml"
    if style == "flow":
        path.write_text("data: " + "[" * 3000 + "]" * 3000 + "\n")
    else:
        path.write_text("study:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(1000)) + "  " * 1001 + "v: 1\n")
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    line = 1 if style == "flow" else 65
    assert err == f"error: deep.yaml: line {line}: values nested more than 64 levels deep (a run file needs a " \
                  "handful); flatten it\n"


def test_a_long_value_aliased_many_times_is_refused_by_size(tmp_path: Path) -> None:
    """One 1 MB string used 99,000 times: few values, but 99 GB once stored as JSON."""
    path = tmp_path / "big.yaml"
    path.write_text('data:\n  name: digits\n  kwargs:\n    blob: &b "' + "x" * 1_000_000 + '"\n'
                    "metrics: [" + ", ".join(["*b"] * 99_000) + "]\n")
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as e:
        config.load(path)
    assert time.monotonic() - t0 < 10
    assert str(e.value) == ("big.yaml: data.kwargs.blob: line 4: aliases (*name) expand this file by 99,000,099,000 "
                            "characters, more than the 1,000,000 allowed (a long value reused many times); write the "
                            "values out or reuse less")


@pytest.mark.parametrize(("first", "second", "value"), [
    ("1", "0x1", "1"), ("yes", "true", "True"), ("~", "null", "None"), ("1", "1.0", "1"), ("on", "On", "True"),
])
def test_duplicate_keys_spelled_differently_are_refused(first: str, second: str, value: str, tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(f"data:\n  name: digits\n  kwargs:\n    {first}: a\n    {second}: b\n")
    with pytest.raises(ConfigError) as e:
        config.load(path)
    assert str(e.value) == (f"dup.yaml: data.kwargs.{second}: duplicate key at lines 4 and 5 (`{first}` and "
                            f"`{second}` are the same key, {value}) (YAML would silently keep only the last); keep one")


def test_keys_that_only_look_alike_are_two_keys(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text("data:\n  name: digits\n  kwargs: {'1': a, 2: b, 'true': c, false: d, 'null': e}\n")
    assert config.read_yaml(path)["data"]["kwargs"] == {"1": "a", 2: "b", "true": "c", False: "d", "null": "e"}
