"""What a user supplies before a study starts, broken every way we know: one line on stderr naming the file
or `package.module:function`, the exception and where it was raised in the user's code; exit status 2;
nothing written. The broken files live in tests/bad_inputs/ (and tests/configs/ for the run files whose
messages test_config checks); the raising factories in tests/factories.py and tests/broken_module.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import autotune
from autotune import config
from autotune.cli import app as cli
from autotune.core.errors import ConfigError
from autotune.study import runner as study_mod

ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "tests" / "bad_inputs"
SMALL = {"study": {"name": "s", "n_trials": 1}, "objectives": ["val_accuracy"],
         "model": {"name": "mlp", "hidden": 16}, "train": {"epochs": 1, "device": "cpu"}}


def one_line(capsys: Any, rc: int) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err.strip()


def unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A YAML file this user may not read (root reads anything: there the refusal is the kernel's, simulated)."""
    path = tmp_path / "secret.yaml"
    path.write_text("study: {n_trials: 1}\n")
    path.chmod(0)
    if os.geteuid() == 0:
        real = Path.read_bytes

        def refuse(self: Path) -> bytes:
            if self == path:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(Path, "read_bytes", refuse)
    return path


# ---------------------------------------------------------------- the YAML file itself


@pytest.mark.parametrize("kind", ["binary", "latin1", "directory", "unreadable", "missing"])
def test_a_yaml_file_that_cannot_be_read_is_one_line(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    path, expect = {
        "binary": (BAD / "binary.yaml", r"binary\.yaml: not a text file \(byte 0x00 at offset 7\): a binary file\?"),
        "latin1": (BAD / "latin1.yaml", r"latin1\.yaml: not UTF-8 text: byte 0xe9 at line 2, column 18; save the "
                                        r"file as UTF-8"),
        "directory": (tmp_path / "dir.yaml", r"dir\.yaml: is a directory, not a YAML file"),
        "unreadable": (None, r"secret\.yaml: cannot read: Permission denied"),
        "missing": (tmp_path / "nope.yaml", r"nope\.yaml: no such file"),
    }[kind]
    if kind == "directory":
        path.mkdir()
    if kind == "unreadable":
        path = unreadable(tmp_path, monkeypatch)
    with pytest.raises(ConfigError, match=expect):
        config.load(path)
    for command in (["run", str(path), "--plain"], ["validate", str(path)]):
        assert re.search(expect, one_line(capsys, cli.main(command)))
    # The same file given to `autotune profile --params`.
    run_file = tmp_path / "ok.yaml"
    run_file.write_text(yaml.safe_dump(SMALL))
    assert re.search(expect, one_line(capsys, cli.main(["profile", str(run_file), "--params", str(path)])))
    assert not (tmp_path / "studies").exists()


# ---------------------------------------------------------------- user factories and files, every path


def test_raising_data_factory_through_a_real_autotune_run(tmp_path: Path) -> None:
    """The case the issue reported: a 30-line traceback before; one line, exit 2, nothing written now."""
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump({**SMALL, "data": {"factory": "tests.factories:raising_data"}}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "autotune", "run", "f.yaml", "--plain"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr + r.stdout, r.stderr
    assert re.fullmatch(r"error: f\.yaml: data\.factory: tests\.factories:raising_data raised FileNotFoundError: "
                        r"\[Errno 2\] No such file or directory: 'no/such/rows\.csv' "
                        r"\(at factories\.py:\d+ in _read_rows\)\n", r.stderr), r.stderr
    assert not (tmp_path / "studies").exists()


CASES = {  # the run file's broken part -> the key path and what the line must say
    "data_factory": ({"data": {"factory": "tests.factories:raising_data"}},
                     r"data\.factory: tests\.factories:raising_data raised FileNotFoundError: .* "
                     r"\(at factories\.py:\d+ in _read_rows\)"),
    "model_factory": ({"model": {"factory": "tests.factories:raising_model"}},
                      r"model\.factory: cannot build the model for input \(1, 8, 8\): tests\.factories:raising_model "
                      r"raised KeyError: 'large' \(at factories\.py:\d+ in raising_model\)"),
    "module_import": ({"model": {"factory": "tests.broken_module:build"}},
                      r"model\.factory: cannot import 'tests\.broken_module': KeyError: 'depth' "
                      r"\(at broken_module\.py:4 in <module>\)"),
    "checkpoint": ({"model": {"name": "mlp", "checkpoint": str(BAD / "garbage.pt")}},
                   r"model\.checkpoint: cannot read .*garbage\.pt as a state dict: \w+Error: "),
    "teacher": ({"distill": {"teacher": str(BAD / "truncated.pt")}},
                r"distill\.teacher: cannot read .*truncated\.pt as a state dict: \w+Error: "),
    "npz": ({"data": {"name": "npz", "path": str(BAD / "bad_crc.npz")}},
            r"data\.path: cannot read .*bad_crc\.npz: BadZipFile: Bad CRC-32 for file 'x\.npy'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_user_parts_are_one_line_on_every_path(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: Any) -> None:
    """`autotune run`, `run --workers`, `validate`, `profile`, `worker` and the Python API: the same line."""
    monkeypatch.chdir(tmp_path)
    broken, expect = CASES[case]
    raw = {**SMALL, **broken, "model": {**SMALL["model"], **broken.get("model", {})}}
    journal = f"journal:///{tmp_path}/j.log"
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(raw))
    full = rf"b\.yaml: {expect}"
    for command in (["run", "b.yaml", "--plain"], ["run", "b.yaml", "--plain", "--workers", "1", "--storage", journal],
                    ["validate", "b.yaml"], ["profile", "b.yaml"]):
        assert re.search(full, one_line(capsys, cli.main(command))), command
    assert not (tmp_path / "studies").exists() and not (tmp_path / "j.log").exists()
    for call in (autotune.run, autotune.train):
        with pytest.raises(ConfigError, match=full):
            call(str(path))
    assert not (tmp_path / "studies").exists()
    # A worker joining from a machine where the factory or file fails: one line, before any trial.
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump(SMALL))
    study = study_mod.open_study(config.load(ok, {"study.storage": journal}))
    study.set_user_attr("config", {**study.user_attrs["config"], **{k: raw[k] for k in broken}})
    study.set_user_attr("source", str(path))
    assert re.search(full, one_line(capsys, cli.main(["worker", "--storage", journal, "--study", "s",
                                                      "--trust-stored-code"])))  # (its config was changed: trusted)
    assert study.get_trials() == []
