"""`autotune doctor`: the machine's versions and device, and each precision actually tried, as the CLI prints it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from autotune.observe import doctor
from autotune.spec.settings import PRECISIONS
from autotune.training import accel, energy_unavailable
from tests.support import run_autotune as autotune


def test_doctor_prints_the_device_and_one_row_per_precision(tmp_path: Path) -> None:
    r = autotune("doctor", "--device", "cpu", "--no-compile", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert re.search(rf"^\s+torch: {re.escape(torch.__version__)}$", out, re.M)
    assert re.search(r"^\s+device: cpu \(", out, re.M)
    for p in PRECISIONS:  # each row says what precision_error says for this machine: tried, not assumed
        row = re.search(rf"^\s*(ok|NO)  precision {p}\s+(.*)$", out, re.M)
        assert row is not None, out
        why = accel.precision_error("cpu", p)
        assert row.group(1) == ("ok" if why is None else "NO")
        assert row.group(2) == (why or "autocast forward+backward ran")
    assert re.search(r"^\s*ok  channels_last\s+conv output channels_last: True$", out, re.M)
    assert "compile" not in out.split("channels_last", 1)[1]  # --no-compile
    # the meters, as validation will judge them: energy here only where RAPL is readable
    assert re.search(r"^\s*ok  peak_memory_mb\s+the process's resident high-water mark$", out, re.M)
    why = energy_unavailable(torch.device("cpu"))
    assert re.search(rf"^\s*{'NO' if why else 'ok'}  energy_j\s+{re.escape(why or 'RAPL counters')}$", out, re.M)


def test_doctor_on_a_device_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    r = autotune("doctor", "--device", "tpu", "--no-compile", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == "error: unknown device 'tpu'; allowed: auto, cpu, cuda, cuda:N, mps"


@pytest.mark.slow
def test_doctor_tries_a_real_compile() -> None:
    rep = doctor.report("cpu", with_compile=True)
    check = next(c for c in rep["checks"] if c.name == "compile")
    assert check.ok, check.detail  # this machine has a C++ compiler: torch.compile forward+backward ran
    assert re.fullmatch(r"torch\.compile forward\+backward in \d+\.\d+s", check.detail)
