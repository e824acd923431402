"""The command line as a user runs it: real subprocesses, exit codes, one-line errors."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tests.support import run_autotune as autotune

ROOT = Path(__file__).resolve().parents[2]


SMALL = """
study: {name: cli, n_trials: 4, seed: 0}
objectives: [val_accuracy, train_time_s]
model: {name: cnn, channels: [8, 16], hidden: 32}
train: {epochs: 2, cpu_threads: 1}
space:
  lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}
  batch_size: {type: categorical, choices: [64, 128]}
"""


def test_run_end_to_end_then_resume_and_best(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SMALL)
    r = autotune("run", "s.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "trial   0" in out and "trial   3" in out and "COMPLETE" in out
    assert "Pareto front" in out and "Recommended configuration" in out
    assert (tmp_path / "studies" / "cli.db").exists()
    study = optuna.load_study(study_name="cli", storage=f"sqlite:///{tmp_path}/studies/cli.db")
    assert len(study.trials) == 4

    r = autotune("run", "s.yaml", "--n-trials", "5", "--sampler", "random", cwd=tmp_path)  # resume to 5
    assert r.returncode == 0, r.stderr
    assert "4 finished, running 1 more" in r.stdout
    assert len(optuna.load_study(study_name="cli", storage=f"sqlite:///{tmp_path}/studies/cli.db").trials) == 5

    run_file = (tmp_path / "s.yaml").read_text()
    r = autotune("best", "s.yaml", "--export", "s.yaml", cwd=tmp_path)  # the run file itself: refused, untouched
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "s.yaml: --export: s.yaml is the run file this command reads; give another path" in r.stderr
    assert (tmp_path / "s.yaml").read_text() == run_file
    r = autotune("report", "s.yaml", "-o", "studies", cwd=tmp_path)  # a folder: refused before the report is made
    assert r.returncode == 2 and "s.yaml: -o: studies is a folder; give a file name" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not list(tmp_path.glob(".*.tmp"))
    r = autotune("best", "s.yaml", "--export", "best.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Recommended configuration" in r.stdout and (tmp_path / "best.yaml").exists()
    r = autotune("run", "best.yaml", cwd=tmp_path)  # the export is a runnable YAML with every setting fixed
    assert r.returncode == 0, r.stderr
    assert "trial   0  COMPLETE" in r.stdout
    # (a journal storage given on the command line: cli_tests/test_launch.py's studies run on journals)


# One config a stage (schema, YAML, a user's factory, the data) by default: each subprocess costs about 3.5 s of CPU,
# and config_tests/test_config.py::test_bad_config_message checks every config's message (these two included).
@pytest.mark.parametrize("name", ["unknown_sampler", pytest.param("log_low_zero", marks=pytest.mark.slow),
                                  "malformed_yaml", "bad_factory", "data_nan_x",
                                  pytest.param("image_unreadable", marks=pytest.mark.slow)])
def test_bad_config_one_line_exit_2(name: str, tmp_path: Path) -> None:
    r = autotune("run", str(ROOT / "tests" / "configs" / f"{name}.yaml"), cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"error: {name}.yaml: "), r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "studies").exists()


def test_validate_ok_and_bad_override(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SMALL)
    r = autotune("validate", "s.yaml", cwd=tmp_path)
    assert r.returncode == 0 and "s.yaml: ok" in r.stdout
    r = autotune("validate", "s.yaml", "--sampler", "bayes", cwd=tmp_path)
    assert r.returncode == 2 and "study.sampler: unknown sampler 'bayes'" in r.stderr
    assert not (tmp_path / "studies").exists()


def test_validate_cifar_example_without_the_data(tmp_path: Path) -> None:
    r = autotune("validate", str(ROOT / "search_spaces" / "cifar10_resnet.yaml"), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "data.path: no such folder: data/cifar-10-batches-py" in r.stderr
    assert "data_batch_1, data_batch_2, data_batch_3, data_batch_4, data_batch_5" in r.stderr
    assert "https://www.cs.toronto.edu/~kriz/cifar.html" in r.stderr
    assert not (tmp_path / "studies").exists()


def test_a_port_out_of_range_is_refused_before_anything_opens(tmp_path: Path) -> None:
    for cmd in (["dashboard"], ["storage-proxy", "s.yaml"]):
        (tmp_path / "s.yaml").write_text(SMALL)
        r = autotune(*cmd, "--port", "99999", cwd=tmp_path)
        assert r.returncode == 2 and "--port: must be a port number 0-65535; got 99999" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not (tmp_path / "studies").exists()


def test_best_without_study(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SMALL)
    r = autotune("best", "s.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "no study 'cli'" in r.stderr
    assert not (tmp_path / "studies").exists()  # a reading command makes no database


def test_read_only_commands_print_no_optuna_logs_and_leave_its_verbosity(tmp_path: Path) -> None:
    """`best`, `report`, `validate` on an existing study: Optuna's "Using an existing study" and the like are not
    the command's output; a library user's own Optuna verbosity is theirs again afterwards."""
    import logging

    import yaml

    import autotune
    from autotune.cli import app as cli
    from tests.support import tiny

    cfg = tiny(tmp_path, study={"n_trials": 1}, train={"epochs": 1})
    autotune.run(cfg)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    heard: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = heard.append  # type: ignore[method-assign]
    logging.getLogger("optuna").addHandler(handler)
    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        for argv in (["best", str(path)], ["report", str(path), "-o", str(tmp_path / "r.html")],
                     ["validate", str(path)]):
            assert cli.main(argv) == 0, argv
            assert optuna.logging.get_verbosity() == optuna.logging.INFO, argv
    finally:
        logging.getLogger("optuna").removeHandler(handler)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    assert [r.getMessage() for r in heard if r.levelno < logging.WARNING] == []


def test_a_config_warning_is_one_line_and_the_warnings_machinery_is_restored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import warnings

    from autotune.cli import app as cli

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "cnn.yaml"
    path.write_text("train: {optimizer: adam}\nspace:\n  momentum: {type: float, low: 0.0, high: 0.9, "
                    "when: {optimizer: sgd}}\n")
    before = warnings.showwarning
    assert cli.main(["validate", str(path)]) == 0
    assert warnings.showwarning is before
    err = capsys.readouterr().err
    assert err == ("warning: cnn.yaml: space.momentum.when.optimizer: can never hold: optimizer is not searched and "
                   "is fixed at 'adam', so momentum is never sampled (search optimizer or drop the condition)\n"), err
