"""`autotune run` when a user's code misbehaves: Ctrl-C, threads left running, sys.exit, code stuck for good.
Real subprocesses, as a user runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from tests import user_fits

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def write(tmp_path: Path, fit: str, train: str = "{epochs: 1, batch_size: 64}", more: str = "") -> Path:
    src = tmp_path / "u.yaml"
    src.write_text(f"study: {{name: u, storage: 'sqlite:///{tmp_path}/u.db', n_trials: 2}}\n"
                   f"trainer: tests.user_fits:{fit}\ntrain: {train}\n{more}")
    return src


def trials(tmp_path: Path) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="u", storage=f"sqlite:///{tmp_path}/u.db").trials


def run(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def test_ctrl_c_twice_records_the_running_trial_and_exits_130(tmp_path: Path) -> None:
    ready = tmp_path / "in_the_step"
    src = write(tmp_path, "fit_sleeps_forever",
                f"{{epochs: 2, batch_size: 64, user.where: step, user.ready: '{ready}'}}")
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(src), "--plain"], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Ctrl-C inside the fit's sleep: waited for (a fixed 2 s after the trial's start did not reach it on busy cores)
        deadline = time.monotonic() + 90
        while not ready.exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        time.sleep(0.2)  # from the file's creation into the sleep: two statements
        proc.send_signal(signal.SIGINT)
        time.sleep(0.1)
        proc.send_signal(signal.SIGINT)  # impatient: again, during the cleanup
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert [ln for ln in err.splitlines() if ln.strip()] == [
        f"interrupted: finished trials are kept in sqlite:///{tmp_path}/u.db; run again to resume"]
    assert "Traceback" not in out
    (t,) = trials(tmp_path)
    assert t.state.name == "FAIL" and t.user_attrs["stop_reason"] == "interrupted", t.user_attrs
    assert t.user_attrs["error"].startswith("interrupted at epoch 0: interrupted (SIGINT) (at user_fits.py:")


def test_a_thread_left_running_by_the_fit_does_not_keep_the_command_alive(tmp_path: Path) -> None:
    r = run("-m", "autotune", "run", str(write(tmp_path, "fit_leaves_a_thread")), "--plain", cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "note: exiting with 2 thread(s) your code started still running: users-logger, users-logger" in r.stderr
    assert "2 trials in the study (2 complete" in r.stdout  # the summary came first


def test_sys_exit_in_the_fit_fails_the_trial_and_the_run_goes_on(tmp_path: Path) -> None:
    r = run("-m", "autotune", "run", str(write(tmp_path, "fit_exits")), "--plain", cwd=ROOT)
    assert r.returncode == 1, r.stderr  # (both trials failed: the command says so, below)
    assert "Traceback" not in r.stderr
    lines = Path(user_fits.__file__).read_text().splitlines()
    line = next(i for i, s in enumerate(lines, 1) if "lambda: sys.exit(3)" in s)
    assert [t.state.name for t in trials(tmp_path)] == ["FAIL", "FAIL"]
    assert trials(tmp_path)[0].user_attrs["error"] == f"SystemExit: 3 (at user_fits.py:{line} in <lambda>)"


@pytest.mark.slow  # (7-14 s of real processes: the default run stays under 10 minutes)
def test_a_fit_that_will_not_stop_is_recorded_and_its_process_ends(tmp_path: Path) -> None:
    """The last resort: interrupted at hang_seconds, still running a grace period later (it swallows every
    exception, as code stuck in C would not return): its trial is recorded PRUNED and the process ends."""
    src = write(tmp_path, "fit_swallows_everything", more="pruning: {slow: {hang_seconds: 1}}\n")
    t0 = time.monotonic()
    # torch._dynamo (which ctx.prepare imports, 1-3 s on a busy machine) is imported first: the hang limit of 1 s
    # must fall in the fit's loop, not in that import
    r = run("-c", "import sys, torch._dynamo; from autotune.core import watchdog as w; w.GRACE_S = 1.0; "
                  "from autotune.core import lifetime; lifetime.as_program(); "  # (what `autotune` itself says)
                  f"from autotune.cli.app import main; sys.exit(main(['run', {str(src)!r}, '--plain']))", cwd=ROOT)
    assert time.monotonic() - t0 < 60
    assert r.returncode == 2, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert errors == ["error: tests.user_fits:fit_swallows_everything: trial 0 stopped (hang): trial wall time over "
                      "hang_seconds 1 (hung or far too slow); still running 1 s after it was interrupted (stuck in "
                      "native code, or catching every exception); recorded it PRUNED (hang) and ended the process "
                      "(finished trials are kept)"]
    (t,) = trials(tmp_path)
    assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "hang" and t.user_attrs["stop_epoch"] == 0
    assert "settings" in t.user_attrs  # what was buffered for the trial was written too


# pytorch/examples' shape: the arguments parsed at import, at module level, and read by the training code
ARGV_SCRIPT = '''import argparse
import sys

import torch
from torch import nn

parser = argparse.ArgumentParser(description="an example")
parser.add_argument("--batch-size", type=int, default=64, metavar="N")
parser.add_argument("--seed", type=int, {seed})
args = parser.parse_args()
SEEN = list(sys.argv)


def fit(ctx):
    assert SEEN == [__file__], SEEN
    torch.manual_seed(args.seed)
    x = torch.randn(128, 4)
    y = (x.sum(1) > 0).long()
    model, _ = ctx.prepare(nn.Linear(4, 2))
    loader = ctx.loader(torch.utils.data.TensorDataset(x, y), train=True)
    for _ in ctx.epochs():
        for xb, yb in loader:
            ctx.backward(nn.functional.cross_entropy(model(xb), yb))
        with torch.no_grad():
            ctx.report(val_accuracy=(model(x).argmax(1) == y).float().mean().item())
'''


def write_argv_script(tmp_path: Path, seed: str) -> Path:
    (tmp_path / "argv_script.py").write_text(ARGV_SCRIPT.format(seed=seed))
    src = tmp_path / "argv.yaml"
    src.write_text(f"study: {{name: u, storage: 'sqlite:///{tmp_path}/u.db', n_trials: 2}}\n"
                   "trainer: argv_script:fit\ntrain: {epochs: 1, batch_size: 64}\n")
    return src


@pytest.mark.slow  # (7-14 s of real processes: the default run stays under 10 minutes)
def test_a_script_that_parses_its_arguments_at_import_sees_only_its_own_file(tmp_path: Path) -> None:
    """`args = parser.parse_args()` at import: the module sees `[its file]` (its defaults), not autotune's command
    line, through `validate` and `run` (a worker process imports it again)."""
    src = write_argv_script(tmp_path, "default=1")
    r = run("-m", "autotune", "validate", str(src), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith(f"{src}: ok"), r.stdout + r.stderr
    r = run("-m", "autotune", "run", str(src), "--plain", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "unrecognized arguments" not in r.stderr
    assert [t.state.name for t in trials(tmp_path)] == ["COMPLETE", "COMPLETE"]


def test_a_script_whose_import_parse_needs_an_argument_is_one_line_naming_its_file(tmp_path: Path) -> None:
    src = write_argv_script(tmp_path, "required=True")
    for cmd in ("validate", "run"):
        r = run("-m", "autotune", cmd, str(src), cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert "Traceback" not in r.stderr
        # argparse's own usage (under the script's name, not autotune's), then autotune's one line
        assert "usage: argv_script.py" in r.stderr and "usage: autotune" not in r.stderr
        assert r.stderr.splitlines()[-1] == (
            "error: argv.yaml: trainer: importing 'argv_script' ended the process (exit status 2): argv_script.py "
            "parses its command line at import, and while autotune imports it that holds no arguments: give each "
            "argument a default, or parse inside `if __name__ == '__main__':`")


def test_importing_the_users_module_restores_sys_argv() -> None:
    from autotune.core import userref

    before = sys.argv
    with userref._own_argv("tests.user_fits") as seen:
        assert sys.argv == seen == [user_fits.__file__]
    assert sys.argv is before


def test_an_own_fits_misspelt_objective_stops_the_run_at_its_first_report(tmp_path: Path) -> None:
    """As the integrations stop at their first evaluation: one trial, one epoch, exit 2, a did-you-mean with the
    objective's key path; not three failed trials with advice (declare it under `metrics:`) that would not fix it."""
    src = write(tmp_path, "fit_reports_misspelt", "{epochs: 3, batch_size: 64}")
    r = run("-m", "autotune", "run", str(src), "--plain", cwd=ROOT)
    assert r.returncode == 2, r.stderr
    line = next(i for i, s in enumerate(Path(user_fits.__file__).read_text().splitlines(), 1) if "val_acc=" in s)
    text = (f"ctx.report(val_acc=...) at user_fits.py:{line} in fit_reports_misspelt: 'val_acc' is not an objective "
            "or a declared metric (did you mean 'val_accuracy'?); allowed: train_loss, val_accuracy, val_loss")
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [f"error: u.yaml: objectives.0.metric: {text}"]
    (t,) = trials(tmp_path)
    assert t.state.name == "FAIL" and t.user_attrs["error"] == text
    assert t.user_attrs["stop_epoch"] == 0  # (its first report: no epoch recorded)


@pytest.mark.slow  # (7-14 s of real processes: the default run stays under 10 minutes)
def test_a_run_whose_every_trial_failed_exits_non_zero_with_one_line(tmp_path: Path) -> None:
    """Two trials, both failing, fewer than max_repeated_errors (3): the run goes on to its end, then the command
    says that nothing of this run completed and exits 1 (a script or CI step must not read it as a success)."""
    r = run("-m", "autotune", "run", str(write(tmp_path, "fit_raises")), "--plain", cwd=ROOT)
    assert r.returncode == 1, r.stderr
    line = next(i for i, s in enumerate(Path(user_fits.__file__).read_text().splitlines(), 1) if '["depth"]' in s)
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [
        "error: every trial this run ran failed (2 of 2); the last: KeyError: 'depth' "
        f"(at user_fits.py:{line} in fit_raises)"]
    assert "2 trials in the study (0 complete, 0 pruned, 2 failed)" in r.stdout  # the summary came first
    # one trial that trained is enough: exit 0 (fit_fails_once fails its first trial only)
    (tmp_path / "u.db").unlink()
    src = write(tmp_path, "fit_fails_once", "{epochs: 1, batch_size: 64, user.marker: %s}" % (tmp_path / "m"))
    r = run("-m", "autotune", "run", str(src), "--plain", cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert [t.state.name for t in trials(tmp_path)] == ["FAIL", "COMPLETE"]


@pytest.mark.slow  # (7-14 s of real processes: the default run stays under 10 minutes)
def test_a_script_that_parses_its_arguments_at_import_trains_on_two_ranks(tmp_path: Path) -> None:
    """devices 2: each rank is a new process that imports the module by name, with the command line it was started
    with: the module's own file there too (not `autotune run ...`)."""
    src = write_argv_script(tmp_path, "default=1")
    src.write_text(src.read_text().replace("train: {epochs: 1, batch_size: 64}",
                                           "train: {epochs: 1, batch_size: 64, devices: 2, device: cpu}"))
    r = run("-m", "autotune", "run", str(src), "--plain", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "unrecognized arguments" not in r.stderr
    done = trials(tmp_path)
    assert [t.state.name for t in done] == ["COMPLETE", "COMPLETE"], [t.user_attrs for t in done]
