"""Storage faults, real ones: a journal record cut off by a full disk, a full file system under a journal and under
a SQLite file mid-run (a size-capped tmpfs in a private mount namespace), a PostgreSQL server stopped mid-run and
started again (a private server of this test's own), and a study on a read-only mount read by `report` and `best`.

A private mount namespace: a holder process made by `unshare -m` mounts the file system and sleeps; every other
process (the `autotune` commands, this test) reaches it through `/proc/HOLDER/root/...`, so nothing is mounted in
the machine's own namespace and the mount goes with the holder. Where mounting is impossible (not root, no
CAP_SYS_ADMIN) these tests skip, saying so.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autotune.core import storage_fault
from autotune.study.journal_lock import JournalFile
from tests.support import ROOT, write_cfg

PAGE = 4096


@dataclass
class Mount:
    """A tmpfs mounted in a private mount namespace: the `autotune` commands run inside it (`autotune`); this test
    reads its files through `/proc/HOLDER/root` (`outside`). (SQLite resolves that magic link to the machine's own
    root, so a database must be opened from inside.)"""
    holder: subprocess.Popen[str]
    inside: Path  # its mount point as the processes in the namespace see it

    @property
    def outside(self) -> Path:
        return Path(f"/proc/{self.holder.pid}/root{self.inside}")

    def enter(self) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "-m", "--"]

    def run(self, *cmd: str) -> None:
        """A command inside the namespace (mount -o remount,ro ...)."""
        subprocess.run([*self.enter(), *cmd], check=True, capture_output=True, text=True, timeout=30)

    def autotune(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return autotune(*args, cwd=cwd, prefix=self.enter())

    def copy(self, to: Path) -> Path:
        """The file system's files, copied out (to read them here: a SQLite file with its -wal)."""
        shutil.copytree(self.outside, to)
        return to

    def fill(self, leave: int) -> Path:
        """Fill the file system to the last byte, then free `leave` bytes (whole pages): what a write may still add
        is `leave` plus what is left in the last page of each file."""
        filler = self.outside / "filler"
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
    inside = tmp_path / "mnt"
    inside.mkdir()
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


def autotune(*args: str, cwd: Path, prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([*(prefix or []), sys.executable, "-m", "autotune", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def set_trials(cfg: Path, n: int) -> None:
    cfg.write_text(cfg.read_text().replace("n_trials: 1\n", f"n_trials: {n}\n"))


def stored_trials(url: str) -> list[optuna.trial.FrozenTrial]:
    """The trials of study `w` at `url` (a journal:/// or sqlite:/// path here), read with plain Optuna."""
    if url.startswith("journal://"):
        storage: Any = optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(url[len("journal://"):]))
    else:
        storage = url
    return optuna.load_study(study_name="w", storage=storage).get_trials()


def trials_in(mount: Mount, url: str, to: Path) -> list[optuna.trial.FrozenTrial]:
    """The trials stored on the mount at `url` (its path as seen inside), read from a copy."""
    copy = mount.copy(to)
    return stored_trials(url.replace(str(mount.inside), str(copy)))


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    """The command's stderr as one `error:` line (and nothing like a traceback)."""
    assert r.returncode == 2, (r.returncode, r.stdout[-3000:], r.stderr[-5000:])
    assert "Traceback" not in r.stderr, r.stderr[-5000:]
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.stderr[-5000:]
    return errors[0]


# ---------------------------------------------------------------- a journal record cut off


def journal_with_a_trial(path: Path) -> optuna.Study:
    storage = optuna.storages.JournalStorage(JournalFile(str(path)))
    study = optuna.create_study(study_name="w", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    return study


def test_the_journal_cuts_a_cut_off_tail_under_its_lock_on_open_and_before_an_append(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "w.log"
    journal_with_a_trial(log)
    whole = log.read_bytes()
    cut = b'{"op_code":4,"worker_id":"x","study_id":0,"da'
    log.write_bytes(whole + cut)
    JournalFile(str(log), read_only=True)  # a reader changes nothing
    assert log.read_bytes() == whole + cut
    with caplog.at_level(logging.WARNING):
        backend = JournalFile(str(log))
    assert log.read_bytes() == whole
    assert [r.getMessage() for r in caplog.records] == [
        f"{log}: removed a record cut off at its end ({len(cut)} bytes, a write that did not finish)"]
    log.write_bytes(whole + cut)  # cut off again while this backend is open (another process died mid-write)
    study = optuna.load_study(study_name="w", storage=optuna.storages.JournalStorage(backend))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert log.read_bytes().startswith(whole) and cut not in log.read_bytes()
    assert [t.state for t in stored_trials(f"journal://{log}")] == [TrialState.COMPLETE] * 2  # today: JSONDecodeError
    assert not Path(f"{log}.lock").exists()


def test_a_journal_write_cut_short_by_a_full_disk_is_cut_back_at_once(tmp_path: Path) -> None:
    with private_tmpfs(tmp_path, "64k") as mount:
        log = mount.outside / "w.log"  # (Python opens it through /proc/HOLDER/root as it is)
        journal_with_a_trial(log)
        before = log.read_bytes()
        mount.fill(leave=0)
        backend = JournalFile(str(log))
        with pytest.raises(OSError, match="No space left on device"):
            backend.append_logs([{"op_code": 8, "pad": "x" * 3 * PAGE}])  # more than the last page has left
        assert log.read_bytes() == before  # today: the first part of the record stays, cut off


def test_storage_faults_are_told_from_other_errors(tmp_path: Path) -> None:
    import sqlalchemy

    def raised_during(first: BaseException) -> AssertionError:  # as Optuna's `Should not reach` is
        try:
            try:
                raise first
            except BaseException:
                raise AssertionError("Should not reach.") from None
        except AssertionError as e:
            e.__context__ = first
            return e

    full = storage_fault(raised_during(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
    assert full == ("the disk is full (No space left on device)", "free space on it")
    assert storage_fault(OSError(errno.EROFS, os.strerror(errno.EROFS)))[1] == "make it writable"  # type: ignore[index]
    engine = sqlalchemy.create_engine("postgresql+psycopg://u@127.0.0.1:1/x")  # nothing listens on port 1
    with pytest.raises(sqlalchemy.exc.OperationalError) as gone:
        engine.connect()
    what, todo = storage_fault(gone.value) or ("", "")
    assert what.startswith("the database server cannot be reached (") and todo == "bring the database server back"
    assert storage_fault(ValueError("no")) is None and storage_fault(OSError(errno.ENOENT, "x")) is None
    assert storage_fault(raised_during(KeyError("Record does not exist."))) is None




@pytest.mark.slow
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
    assert [t.state for t in stored_trials(f"journal://{log}")] == [TrialState.COMPLETE] * 2


def test_a_storage_fault_is_one_line_naming_the_storage_without_its_password() -> None:
    from autotune.config import from_dict
    from autotune.core import StorageFault
    from autotune.study import faults_named

    cfg = from_dict({"study": {"storage": "postgresql://u:secret@db/x"}}, source="s.yaml")
    with pytest.raises(StorageFault) as info, faults_named(cfg):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert str(info.value) == ("s.yaml: study.storage: postgresql://u:***@db/x: the disk is full (No space left on "
                               "device); what was stored before is kept: free space on it, then run the same command "
                               "again to resume")
    with pytest.raises(ValueError), faults_named(cfg):  # anything else passes through as it is
        raise ValueError("not the storage's")


# ---------------------------------------------------------------- a full disk mid-run


def fill_mid_run(tmp_path: Path, mount: Mount, url: str, pages: int) -> tuple[Path, Path]:
    """One trial stored, then the file system filled but for `pages`, and a run of four: the disk fills mid-run
    (a journal with two pages: the second trial fits, the third does not). Returns (the run file, the filler)."""
    cfg = write_cfg(tmp_path, url, 1, single=True)
    r = mount.autotune("run", str(cfg), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    filler = mount.fill(leave=pages * PAGE)
    set_trials(cfg, 4)
    return cfg, filler


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "pages"), [("journal", 2), ("sqlite", 16)])  # (SQLite's -shm alone takes 8)
def test_a_full_disk_mid_run_is_one_line_and_loses_nothing(tmp_path: Path, kind: str, pages: int) -> None:
    """Today: a ~97-line traceback ending in Optuna's `Should not reach` (a journal), a driver's traceback (SQLite)."""
    with private_tmpfs(tmp_path, "1m") as mount:
        url = f"journal://{mount.inside}/w.log" if kind == "journal" else f"sqlite:///{mount.inside}/w.db"
        cfg, filler = fill_mid_run(tmp_path, mount, url, pages)
        r = mount.autotune("run", str(cfg), cwd=tmp_path)
        assert "1 finished, running 3 more" in r.stdout, r.stdout[-3000:]
        line = one_line_error(r)
        assert line.startswith(f"error: {cfg.name}: study.storage: {url}: the disk is full") and \
            "free space on it, then run the same command again to resume" in line, line
        done = [t for t in trials_in(mount, url, tmp_path / "full") if t.state == TrialState.COMPLETE]
        assert len(done) >= 1, r.stderr[-3000:]  # the trial stored before (and those of this run that fit)
        r = mount.autotune("best", str(cfg), cwd=tmp_path)  # read on the full disk
        assert r.returncode == 0 and "Recommended configuration" in r.stdout, r.stdout + r.stderr[-3000:]
        filler.unlink()  # space again: the study resumes where it stopped
        r = mount.autotune("run", str(cfg), cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        trials = trials_in(mount, url, tmp_path / "after")
        assert len([t for t in trials if t.state == TrialState.COMPLETE]) == 4, [t.state for t in trials]
        assert not [t for t in trials if t.state == TrialState.RUNNING]
        assert mount.autotune("best", str(cfg), cwd=tmp_path).returncode == 0


# ---------------------------------------------------------------- a database server gone mid-run


@dataclass
class Server:
    """A PostgreSQL server of this test's own (never the shared test server), stopped and started at will."""
    bin: Path
    data: Path
    port: int

    def pg(self, *args: str) -> None:
        cmd = " ".join([str(self.bin / args[0]), *args[1:]])
        as_postgres = ["su", "postgres", "-s", "/bin/sh", "-c", cmd] if os.getuid() == 0 else ["sh", "-c", cmd]
        subprocess.run(as_postgres, check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        self.pg("pg_ctl", "-D", str(self.data), "-l", str(self.data / "server.log"), "-w", "-o",
                f"'-c listen_addresses=127.0.0.1 -p {self.port} -c fsync=off'", "start")

    def stop(self) -> None:
        self.pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"


@contextmanager
def private_postgres() -> Iterator[Server]:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not found:
        pytest.skip("no PostgreSQL binaries (/usr/lib/postgresql/*/bin): .ci/start_postgres.sh installs them")
    if os.getuid() == 0 and subprocess.run(["id", "postgres"], capture_output=True).returncode != 0:
        pytest.skip("no `postgres` user to run a private PostgreSQL server as (root cannot)")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = Path(tempfile.mkdtemp(prefix="autotune-pg-"))  # (not under pytest's root-only tmp: postgres owns it)
    if os.getuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    server = Server(found[-1].parent, data, port)
    try:
        server.pg("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        server.start()
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            server.stop()
        shutil.rmtree(data, ignore_errors=True)


def completed(url: str) -> int:
    try:
        return len([t for t in stored_trials(url) if t.state == TrialState.COMPLETE])
    except KeyError:  # no study yet
        return 0


@pytest.mark.slow
def test_a_database_server_gone_mid_run_is_one_line_and_the_study_resumes_once_it_is_back(tmp_path: Path) -> None:
    """Today: a 318-line traceback."""
    with private_postgres() as server:
        cfg = write_cfg(tmp_path, server.url, 6, single=True, epochs=2)
        p = subprocess.Popen([sys.executable, "-m", "autotune", "run", str(cfg)], cwd=tmp_path, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            t0 = time.monotonic()
            while not completed(server.url):
                assert p.poll() is None and time.monotonic() - t0 < 240, p.communicate()
                time.sleep(0.2)
            server.stop()  # mid-run: a trial finished, others to come
            out, err = p.communicate(timeout=240)
        finally:
            if p.poll() is None:
                p.kill()
        line = one_line_error(subprocess.CompletedProcess(p.args, p.returncode, out, err))
        assert line.startswith(f"error: {cfg.name}: study.storage: {server.url}: the database server cannot be "
                               "reached"), line
        assert "bring the database server back, then run the same command again to resume" in line, line
        server.start()
        r = autotune("run", str(cfg), cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        trials = stored_trials(server.url)
        assert len([t for t in trials if t.state == TrialState.COMPLETE]) == 6, [t.state for t in trials]
        assert not [t for t in trials if t.state == TrialState.RUNNING]


# ---------------------------------------------------------------- a study on read-only media


OPEN = """
import sys, optuna
from autotune.study import bare_config, make_storage
what, urls = sys.argv[1], sys.argv[2:]
for url in urls:
    if what == "make":
        study = optuna.create_study(study_name="w", storage=make_storage(bare_config(url)))
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    else:
        print(len(optuna.load_study(study_name="w", storage=make_storage(bare_config(url), read_only=True)).trials))
"""


def test_a_journal_and_a_sqlite_file_on_a_read_only_mount_open_read_only(tmp_path: Path) -> None:
    """The storage opening of report, best and dashboard (`make_storage(read_only=True)`); the slow test below runs
    the commands themselves. Today: SQLite's switch to WAL and the journal's lock fail on a read-only mount."""
    with private_tmpfs(tmp_path, "4m") as mount:
        urls = [f"journal://{mount.inside}/w.log", f"sqlite:///{mount.inside}/w.db"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run([*mount.enter(), sys.executable, "-c", OPEN, "make", *urls], check=True, env=env, timeout=120)
        mount.run("mount", "-o", "remount,ro", str(mount.inside))
        r = subprocess.run([*mount.enter(), sys.executable, "-c", OPEN, "read", *urls], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.split() == ["2", "2"], r.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_report_best_and_dashboard_read_a_study_on_a_read_only_mount(tmp_path: Path, kind: str) -> None:
    """Today SQLite is forced to WAL (a write) and `best` takes the journal's lock (a symlink next to it): on a
    read-only mount both fail."""
    with private_tmpfs(tmp_path, "4m") as mount:
        url = f"journal://{mount.inside}/w.log" if kind == "journal" else f"sqlite:///{mount.inside}/w.db"
        cfg = write_cfg(tmp_path, url, 2, single=True)
        r = mount.autotune("run", str(cfg), cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        mount.run("mount", "-o", "remount,ro", str(mount.inside))
        with pytest.raises(OSError, match="Read-only file system"):
            (mount.outside / "probe").write_text("x")  # (really read-only, root included)
        files = sorted(p.name for p in mount.outside.iterdir())

        r = mount.autotune("report", str(cfg), "-o", str(tmp_path / "r.html"), cwd=tmp_path)
        assert r.returncode == 0 and "wrote" in r.stdout, r.stderr[-3000:]
        r = mount.autotune("report", "--storage", url, "-o", str(tmp_path / "s.html"), cwd=tmp_path)
        assert r.returncode == 0 and (tmp_path / "s.html").stat().st_size > 0, r.stderr[-3000:]
        r = mount.autotune("best", str(cfg), cwd=tmp_path)
        assert r.returncode == 0 and "Recommended configuration" in r.stdout, r.stderr[-3000:]

        dash = subprocess.Popen([*mount.enter(), sys.executable, "-m", "autotune", "dashboard", "--storage", url,
                                 "--port", "0"], cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            assert dash.stdout is not None
            seen = []
            for line in dash.stdout:  # (ends when the process does)
                seen.append(line)
                if "optuna-dashboard at http" in line:
                    break
            base = re.search(r"(http://127\.0\.0\.1:\d+)", "".join(seen))
            assert base is not None, "".join(seen)
            with urllib.request.urlopen(f"{base.group(1)}/api/studies", timeout=30) as resp:
                studies = json.load(resp)["study_summaries"]
            assert [s["study_name"] for s in studies] == ["w"]
        finally:
            dash.kill()
            dash.wait(10)
        assert sorted(p.name for p in mount.outside.iterdir()) == files
