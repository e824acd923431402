"""`autotune profile`: one configuration under torch.profiler; a Chrome trace written, the top operators printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from autotune.cli import app as cli

TINY = Path(__file__).parents[1] / "studies" / "tiny_study.yaml"


def test_profile_writes_a_trace_of_the_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = tmp_path / "best.yaml"
    params.write_text(yaml.safe_dump({"train": {"lr": 0.01, "optimizer": "sgd", "batch_size": 128,
                                                "precision": "fp32", "init": "default"}}))
    assert cli.main(["profile", str(TINY), "--params", str(params), "--epochs", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    trace = tmp_path / "tiny-trace.json"
    assert f"chrome trace: {trace}" in out
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert any("conv" in n for n in names) and any("sgd" in n.lower() for n in names)  # the model and its optimizer
    assert re.search(r"input wait: \d+\.\d% of step time; [\d,]+ samples/s; train time \d+\.\d\ds over 1 epoch",
                     out)
    assert "Self CPU" in out  # the operator table


def test_profile_with_bad_params_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = tmp_path / "p.yaml"
    params.write_text("lr: 0.01\noptimiser: adam\n")
    assert cli.main(["profile", str(TINY), "--params", str(params), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: p.yaml: optimiser: unknown setting") and "\n" not in err
    assert not list(tmp_path.glob("*-trace.json"))
