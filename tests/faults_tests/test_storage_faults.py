"""Storage faults, real ones: a journal record cut off by a full disk, a full file system under a journal and under
a SQLite file mid-run (a size-capped tmpfs in a private mount namespace), a PostgreSQL server stopped mid-run and
started again (a private server of this test's own), and a study on a read-only mount read by `report` and `best`.

A private mount namespace: a holder process made by `unshare -m` mounts the file system and sleeps; every other
process (the `autotune` commands, this test) reaches it through `/proc/HOLDER/root/...`, so nothing is mounted in
the machine's own namespace and the mount goes with the holder. Where mounting is impossible (not root, no
CAP_SYS_ADMIN) these tests skip, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.support import ROOT, write_cfg

PAGE = 4096


@dataclass
class Mount:
    """A tmpfs mounted in a private mount namespace: `path` reaches it from any process of this machine."""
    holder: subprocess.Popen[str]
    inside: str  # its mount point as the holder sees it

    @property
    def path(self) -> Path:
        return Path(f"/proc/{self.holder.pid}/root{self.inside}")

    def run(self, *cmd: str) -> None:
        """A command inside the namespace (mount -o remount,ro ...)."""
        subprocess.run(["nsenter", "-t", str(self.holder.pid), "-m", "--", *cmd], check=True, capture_output=True,
                       text=True, timeout=30)

    def fill(self, leave: int) -> Path:
        """Fill the file system to the last byte, then free `leave` bytes (whole pages): what a write may still add
        is `leave` plus what is left in the last page of each file."""
        filler = self.path / "filler"
        with open(filler, "wb", buffering=0) as f:
            try:
                while f.write(b"\0" * PAGE):
                    pass
            except OSError:  # ENOSPC
                pass
        size = filler.stat().st_size
        os.truncate(filler, max(0, size - size % PAGE - leave))
        return filler


@contextmanager
def private_tmpfs(tmp_path: Path, size: str) -> Iterator[Mount]:
    inside = str(tmp_path / "mnt")
    os.makedirs(inside, exist_ok=True)
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        pytest.skip("needs unshare and nsenter (util-linux) to mount a file system in a private namespace")
    holder = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f"mount -t tmpfs -o size={size} tmpfs '{inside}' && echo ready && exec sleep 1800"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    line = holder.stdout.readline()
    if line.strip() != "ready":
        holder.wait(10)
        pytest.skip(f"this machine cannot mount a tmpfs in a private namespace (root with CAP_SYS_ADMIN needed): "
                    f"{holder.stderr.read().strip() if holder.stderr else ''}")
    try:
        yield Mount(holder, inside)
    finally:
        holder.kill()
        holder.wait(10)


def autotune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def set_trials(cfg: Path, n: int) -> None:
    cfg.write_text(cfg.read_text().replace("n_trials: 1\n", f"n_trials: {n}\n"))


def journal_trials(path: Path) -> list[optuna.trial.FrozenTrial]:
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    return optuna.load_study(study_name="w", storage=storage).get_trials()


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    """The command's stderr as one `error:` line (and nothing like a traceback)."""
    assert r.returncode == 2, (r.returncode, r.stdout[-3000:], r.stderr[-5000:])
    assert "Traceback" not in r.stderr, r.stderr[-5000:]
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.stderr[-5000:]
    return errors[0]


# ---------------------------------------------------------------- a journal record cut off


def test_a_cut_off_journal_record_is_truncated_on_open_and_never_poisons_later_appends(tmp_path: Path) -> None:
    """A record cut off mid-line (what a full disk leaves: Optuna's append wrote part of a line) and then a resume:
    today the resume appends onto the cut-off line and every later command fails with a JSONDecodeError."""
    log = tmp_path / "w.log"
    cfg = write_cfg(tmp_path, f"journal://{log}", 1, single=True)
    assert autotune("run", str(cfg), cwd=tmp_path).returncode == 0
    whole = log.read_bytes()
    cut = b'{"op_code":4,"worker_id":"cut-off","study_id":0,"dat'  # the start of a record, as a full disk leaves it
    with open(log, "ab") as f:
        f.write(cut)
    set_trials(cfg, 2)
    r = autotune("run", str(cfg), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    said = [ln for ln in r.stderr.splitlines() if "cut off" in ln]
    assert len(said) == 1 and said[0].endswith(f"{log}: removed a record cut off at its end ({len(cut)} bytes, a "
                                               "write that did not finish)"), r.stderr
    assert log.read_bytes().startswith(whole) and log.read_bytes().endswith(b"\n")
    r = autotune("best", str(cfg), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [t.state for t in journal_trials(log)] == [TrialState.COMPLETE] * 2


# ---------------------------------------------------------------- a full disk mid-run


def fill_mid_run(tmp_path: Path, mount: Mount, url: str) -> tuple[Path, Path]:
    """One trial stored, then the file system filled but for two pages, and a run of four: the second trial fits,
    the third meets the full disk mid-run. Returns (the run file, the filler)."""
    cfg = write_cfg(tmp_path, url, 1, single=True)
    r = autotune("run", str(cfg), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    filler = mount.fill(leave=2 * PAGE)
    set_trials(cfg, 4)
    return cfg, filler


def test_a_full_disk_under_a_journal_mid_run_is_one_line_and_loses_nothing(tmp_path: Path) -> None:
    with private_tmpfs(tmp_path, "256k") as mount:
        log = mount.path / "w.log"
        cfg, filler = fill_mid_run(tmp_path, mount, f"journal://{log}")
        r = autotune("run", str(cfg), cwd=tmp_path)
        line = one_line_error(r)
        assert f"journal://{log}" in line and "No space left on device" in line and "resume" in line, line
        done = [t for t in journal_trials(log) if t.state == TrialState.COMPLETE]
        assert len(done) >= 2, r.stderr[-3000:]  # the trial stored before, and at least one of this run
        r = autotune("best", str(cfg), cwd=tmp_path)  # read on the full disk
        assert r.returncode == 0, r.stderr[-3000:]
        filler.unlink()  # space again: the study resumes where it stopped
        r = autotune("run", str(cfg), cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        trials = journal_trials(log)
        assert len([t for t in trials if t.state == TrialState.COMPLETE]) >= 4, [t.state for t in trials]
        assert not [t for t in trials if t.state == TrialState.RUNNING]
        assert autotune("best", str(cfg), cwd=tmp_path).returncode == 0
