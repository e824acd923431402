"""`autotune speed FILE`: every searched acceleration combination probed in seconds, fastest first."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune import config
from autotune.core import contention
from autotune.speed import sweep as speed

ROOT = Path(__file__).resolve().parents[2]
TAKES = r"(?: (?:contended|noisy) after \d+ take\(s\)|, take \d+)?"  # a progress line's retakes, if any


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


@pytest.mark.slow
def test_cnn_yaml_table_on_cpu() -> None:
    # the timeout only catches a hang: how fast a shared CPU runs is not asserted, the work each row did is
    out = speed_cli("search_spaces/cnn.yaml", "--threads", "1", timeout=300)
    assert out.returncode == 0, out.stderr
    # bounded work: one probe per combination, each the median of PROBE_AGREE..PROBE_WINDOWS short windows
    progress = re.findall(r"\[(\d+)/32\] .*: [\d,]+ samples/s ±\d+%" + TAKES + r" \((\d+) windows\)", out.stderr)
    assert [int(n) for n, _ in progress] == list(range(1, 33))
    assert all(speed.PROBE_AGREE <= int(w) <= speed.PROBE_WINDOWS for _, w in progress)
    assert "not measured" not in out.stdout
    lines = out.stdout.splitlines()
    assert "32 combination(s) of batch_size, precision, channels_last, data_on_device" in lines[0]
    head = lines[1].split()
    assert head[:6] == ["#", "samples/s", "±%", "vs", "best", "compile"]
    rows = [ln.split() for ln in lines[2:] if ln.strip() and ln.split()[0].isdigit()]
    assert len(rows) == 32
    flagged = [r[3] in ("contended", "noisy") for r in rows]  # (a busy machine's rows: listed apart, after)
    assert flagged == sorted(flagged)
    rates = [float(r[1].replace(",", "")) for r, f in zip(rows, flagged) if not f]
    assert rates == sorted(rates, reverse=True) and all(float(r[1].replace(",", "")) > 0 for r in rows)
    assert not rates or rows[0][3] == "1.00x"  # fastest clean row first, every one measured
    assert all(r[2].isdigit() for r in rows)  # every row's spread over its windows
    assert ("warning: " in out.stderr) == any(flagged)
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
    windows = [int(w) for w in re.findall(r"samples/s ±\d+%" + TAKES + r" \((\d+) windows\)", out.stderr)]
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_rows_timed_on_busy_cores_are_taken_again_then_flagged_apart_with_one_warning(tmp_path: Path) -> None:
    """29.2: at 2 threads with busy processes on every core, a row's windows wait for cores: it is taken again (at
    most RETAKES more times) and, still contended or noisy, marked in the table, listed after the clean rows with no
    `vs best`, and one warning line says what to do."""
    from tests.support import busy

    path = user_file(tmp_path, {"batch_size": {"type": "categorical", "choices": [32, 64]}})
    with busy(seconds=60, n=2 * contention.cores()):
        out = speed_cli(str(path), "--threads", "2", cwd=tmp_path, timeout=180)
    assert out.returncode == 0, out.stderr
    takes = re.findall(r"samples/s ±\d+%(?: (contended|noisy) after (\d+) take\(s\)|, take (\d+))? \(", out.stderr)
    assert len(takes) == 2
    assert any(flag or again for flag, _, again in takes), out.stderr  # the load was seen: retaken or flagged
    assert all(int(n) == speed.RETAKES + 1 for flag, n, _ in takes if flag)  # flagged only after every retake
    rows = [ln.split() for ln in out.stdout.splitlines()[2:] if ln.strip() and ln.split()[0].isdigit()]
    flagged = [r for r in rows if r[3] in ("contended", "noisy")]
    assert len(flagged) == sum(1 for flag, _, _ in takes if flag)
    assert all(r[4] == "-" for r in flagged)  # not ranked against the clean rows
    assert [r in flagged for r in rows] == sorted(r in flagged for r in rows)  # apart: after the clean ones
    warning = [ln for ln in out.stderr.splitlines() if ln.startswith("warning: ")]
    if flagged:
        assert len(warning) == 1 and "--threads 1" in warning[0] and "the machine was busy at 2 thread(s)" in warning[0]
    else:
        assert not warning


def test_the_table_ranks_clean_rows_and_lists_flagged_ones_apart() -> None:
    from autotune.training.throughput import Measurement

    def row(sps: float, spread: float, contended: bool = False) -> speed.Row:
        m = Measurement(samples_per_s=sps, steps_per_s=1.0, timed_steps=2, timed_s=1.0, first_step_s=0.1,
                        compile_time_s=0.0, epoch_samples=100.0, peak_memory_bytes=None)
        return speed.Row({"batch_size": int(sps)}, m, spread=spread, contended=contended, takes=3)

    rows = speed.sort([row(100, 3.26, contended=True), row(2661, 0.04), row(900, 0.5), row(1000, 0.02)])
    assert [r.samples_per_s for r in rows] == [2661, 1000, 900, 100]  # clean fastest first, then the flagged
    lines = speed.table(rows).splitlines()
    assert lines[3].split()[1:5] == ["900", "25", "noisy", "-"]
    assert lines[4].split()[1:5] == ["100", "163", "contended", "-"]
    assert lines[2].split()[3] == "0.38x"  # against the fastest clean row
    assert lines[2].split()[1] == "1,000" and lines[1].split()[1] == "2,661"
    note = speed.busy_note(rows, threads=2)
    assert note is not None
    assert note.startswith("2 of 4 measured row(s) stayed contended or noisy after 2 retake(s) (1 waited")
    assert "--threads 1" in note and speed.busy_note(rows[:2], threads=2) is None
