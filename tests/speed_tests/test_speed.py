"""`autotune speed FILE`: every searched acceleration combination probed in seconds, fastest first."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from autotune import config
from autotune.speed import _speed as speed

ROOT = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


def speed_cli(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune", "speed", *args], cwd=cwd, env=env(), capture_output=True,
                          text=True, timeout=timeout)


def user_file(tmp_path: Path, space: dict[str, Any], fit: str = "fit") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"trainer": f"tests.user_fits:{fit}", "train": {"device": "cpu", "epochs": 2},
                                    "space": space}))
    return path


def test_cnn_yaml_table_on_cpu() -> None:
    # the timeout only catches a hang: how fast a shared CPU runs is not asserted, the work each row did is
    out = speed_cli("search_spaces/cnn.yaml", "--threads", "1", timeout=300)
    assert out.returncode == 0, out.stderr
    # bounded work: one probe per combination, each the median of PROBE_AGREE..PROBE_WINDOWS short windows
    progress = re.findall(r"\[(\d+)/32\] .*: [\d,]+ samples/s ±\d+% \((\d+) windows\)", out.stderr)
    assert [int(n) for n, _ in progress] == list(range(1, 33))
    assert all(speed.PROBE_AGREE <= int(w) <= speed.PROBE_WINDOWS for _, w in progress)
    assert "not measured" not in out.stdout
    lines = out.stdout.splitlines()
    assert "32 combination(s) of batch_size, precision, channels_last, data_on_device" in lines[0]
    head = lines[1].split()
    assert head[:6] == ["#", "samples/s", "±%", "vs", "best", "compile"]
    rows = [ln.split() for ln in lines[2:] if ln.strip() and ln.split()[0].isdigit()]
    assert len(rows) == 32
    rates = [float(r[1].replace(",", "")) for r in rows]
    assert rates == sorted(rates, reverse=True) and rates[-1] > 0  # fastest first, every one measured
    assert rows[0][3] == "1.00x"
    assert all(r[2].isdigit() for r in rows)  # every row's spread over its windows
    assert {r[-4] for r in rows} == {"32", "64", "128", "256"}  # batch_size column
    assert "[32/32]" in out.stderr  # progress, one line per combination, on stderr


def test_rows_are_medians_with_their_spread_and_the_header_names_what_is_held(tmp_path: Path) -> None:
    """A user's width (user.width, searched by the study) is held at its middle value for every row: the header
    says so; each row is the median of several windows, with its spread in the ±% column."""
    path = user_file(tmp_path, {"user.width": {"type": "int", "low": 16, "high": 64},
                                "batch_size": {"type": "categorical", "choices": [32, 64]},
                                "lr": {"type": "float", "low": 0.01, "high": 0.1}})
    cfg = config.load(path)
    assert speed.held_fixed(cfg) == {"user.width": 40}
    out = speed_cli(str(path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "2 combination(s) of batch_size" in lines[0] and lines[0].endswith("; held fixed: user.width 40")
    assert lines[1].split()[:3] == ["#", "samples/s", "±%"]
    rows = [ln.split() for ln in lines[2:] if ln.strip() and ln.split()[0].isdigit()]
    assert len(rows) == 2 and all(r[2].isdigit() for r in rows)
    windows = [int(w) for w in re.findall(r"samples/s ±\d+% \((\d+) windows\)", out.stderr)]
    assert len(windows) == 2 and all(speed.PROBE_AGREE <= w <= speed.PROBE_WINDOWS for w in windows)


def test_failing_combination_is_marked_with_its_error(tmp_path: Path) -> None:
    path = user_file(tmp_path, {"channels_last": {"type": "bool"}, "lr": {"type": "float", "low": 0.01,
                                                                         "high": 0.1}}, fit="fit_picky")
    out = speed_cli(str(path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = [ln.split() for ln in out.stdout.splitlines() if ln.strip() and ln.split()[0].isdigit()]
    assert rows[0][-1] == "false" and rows[0][1] != "fails"
    assert rows[1][1] == "fails" and rows[1][-1] == "true"
    assert "RuntimeError: no channels_last kernel for this operator" in out.stdout


def test_compile_rows_come_last_within_the_budget_or_left_out(tmp_path: Path) -> None:
    """Compiling takes 15-60 s a combination on a CPU: --no-compile leaves them out, a spent budget skips them."""
    path = user_file(tmp_path, {"compile": {"type": "bool"},
                                "batch_size": {"type": "categorical", "choices": [32, 64]}})
    cfg = config.load(path)
    assert sorted(c["compile"] for c in speed.combinations(cfg)) == [False, False, True, True]
    out = speed_cli(str(path), "--no-compile", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "note: 2 combination(s) with compile: true are left out (--no-compile)" in out.stdout
    assert out.stdout.count("compile left out (--no-compile)") == 2
    out = speed_cli(str(path), "--budget", "0.001", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "probed last, while the --budget of 0.001 s lasts" in out.stdout
    rows = [ln.split() for ln in out.stdout.splitlines() if ln.strip() and ln.split()[0].isdigit()]
    assert [r[1] for r in rows] == ["skipped"] * 4  # nothing fits in 1 ms
    assert out.stdout.count("not measured: over the time budget (--budget)") == 3  # and the first one was cut


def test_combinations_follow_when_and_ranges(tmp_path: Path) -> None:
    cfg = config.from_dict({"trainer": "tests.user_fits:fit", "space": {
        "compile": {"type": "bool"},
        "compile_mode": {"type": "categorical", "choices": ["default", "max-autotune"], "when": {"compile": True}},
        "batch_size": {"type": "int", "low": 16, "high": 1024, "log": True},
        "lr": {"type": "float", "low": 0.01, "high": 0.1}}}, source=str(tmp_path / "c.yaml"))
    grid = speed.searched(cfg)
    assert list(grid) == ["compile", "compile_mode", "batch_size"]  # lr does not set throughput
    assert grid["batch_size"] == [16, 45, 128, 362, 1024]  # a long range: a log-spaced handful
    combos = speed.combinations(cfg)
    assert len(combos) == 5 + 2 * 5  # compile off: compile_mode inactive (one row per batch size)
    assert all("compile_mode" not in c for c in combos if not c["compile"])


def test_a_config_mistake_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("space: {precision: {type: categorical, choices: [fp64]}}\n")
    out = speed_cli(str(path), cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: bad.yaml: space.precision.choices: unknown precision 'fp64' (did you mean 'fp16'?); "
        "allowed: bf16, fp16, fp32"]
