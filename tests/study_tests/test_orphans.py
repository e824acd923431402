"""No zombies: a trial whose owner is provably gone ends FAIL (orphaned) and is retried once, on every storage.

Real processes: a SIGKILL-ed `autotune run` on SQLite and on a journal file, then a resumed run; dead,
zombie and reused process ids; stale heartbeats on SQLite.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune import config
from autotune.study import orphans
from autotune.study import runner as study_mod
from autotune.study import storage as storage_mod
from tests.support import FINISHED, finish, journal_study, load, wait_mid_trial, write_cfg
from tests.support import start_autotune as autotune


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


# ---------------------------------------------------------------- who owns a trial, and is it alive


def test_owner_stamp_holds_host_pid_start_time_and_scope() -> None:
    me = orphans.Owner.parse(orphans.owner_id())
    assert me is not None and me.host == socket.gethostname() and me.pid == os.getpid()
    assert me.start is not None and me.is_me() and me.alive()
    assert me.scope is not None and me.scope == orphans.scope() and me.here()  # boot id and pid namespace
    assert orphans.Owner.parse("old-host:123") == orphans.Owner("old-host", 123, None)  # an older stamp
    assert orphans.Owner.parse("old-host:123:456") == orphans.Owner("old-host", 123, 456)
    assert orphans.Owner.parse("nonsense") is None and orphans.Owner.parse(None) is None


def test_dead_zombie_and_reused_pids_are_gone() -> None:
    p = _sleeper()
    try:
        live = orphans.Owner.parse(f"{socket.gethostname()}:{p.pid}:{orphans._proc_stat(p.pid)[1]}")  # type: ignore
        assert live is not None and live.alive()
        # Same pid, another start time: the owner died and its pid was given to another process.
        assert not orphans.Owner(live.host, p.pid, live.start + 1).alive()  # type: ignore[operator]
        assert not orphans.Owner(live.host, os.getpid(), 1).alive()  # even our own pid
        os.kill(p.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while orphans._proc_stat(p.pid)[0] != "Z" and time.monotonic() < deadline:  # type: ignore[index]
            time.sleep(0.01)
        assert not live.alive()  # a zombie (killed, not yet reaped by its parent) is dead
    finally:
        p.kill()
        p.wait()
    assert not live.alive()  # and so is a pid that no longer exists


@pytest.mark.parametrize("storage", ["sqlite", "journal"])
def test_the_storage_stamps_a_trial_in_the_write_that_creates_or_takes_it(storage: str, tmp_path: Path) -> None:
    """No instant exists where a trial is RUNNING without its owner: a process killed right after `ask`
    (before any objective code ran) still leaves a trial `reap` can prove dead."""
    url = f"sqlite:///{tmp_path}/s.db" if storage == "sqlite" else f"journal:///{tmp_path}/s.log"
    cfg = config.load(write_cfg(tmp_path, url, 3, name="s", single=True))
    study = study_mod.open_study(cfg)
    other = optuna.load_study(study_name="s", storage=storage_mod.make_storage(cfg))  # another reader
    fresh = study.ask()
    assert orphans.owner_of(other.get_trials()[fresh.number]) == orphans.Owner.parse(orphans.owner_id())
    study.enqueue_trial({"lr": 0.01})
    queued = study.ask()  # a WAITING trial (a retry, an enqueued one) is stamped as it is taken
    assert orphans.owner_of(other.get_trials()[queued.number]) == orphans.Owner.parse(orphans.owner_id())
    orphans.retry_once(study, other.get_trials()[fresh.number])  # a template keeps its own (no) owner
    assert orphans.OWNER_ATTR not in other.get_trials(states=(TrialState.WAITING,))[0].user_attrs


def _ask(study: optuna.Study, owner: str) -> optuna.Trial:
    t = study.ask()
    t.suggest_float("lr", 1e-3, 1e-1, log=True)
    t.set_user_attr(orphans.OWNER_ATTR, owner)
    t.set_user_attr("history", [{"epoch": 1}])
    return t


def test_reap_fails_only_provably_dead_owners_and_retries_them_once(tmp_path: Path) -> None:
    study = journal_study(tmp_path)
    here = socket.gethostname()
    p = _sleeper()
    stat = orphans._proc_stat(p.pid)
    assert stat is not None
    alive = _ask(study, f"{here}:{p.pid}:{stat[1]}")
    reused = _ask(study, f"{here}:{p.pid}:{stat[1] + 7}")  # the same pid, started at another time
    elsewhere = _ask(study, "another-host:4242:99")
    mine = study.ask()  # stamped by the storage
    # A trial some other Optuna client created: no owner, nothing to prove.
    unowned = study._storage.create_new_trial(study._study_id, optuna.trial.create_trial(state=TrialState.RUNNING))
    unowned = study.get_trials()[-1]
    assert orphans.OWNER_ATTR not in unowned.user_attrs
    try:
        assert orphans.reap(study) == [reused.number]
    finally:
        p.kill()
        p.wait()
    assert orphans.reap(study) == [alive.number]  # its process is gone now
    assert orphans.reap(study) == []  # once, not twice
    trials = study.get_trials()
    for t in (alive, reused):
        dead = trials[t.number]
        assert dead.state == TrialState.FAIL and dead.user_attrs["stop_reason"] == "orphaned"
        assert "died mid-trial" in dead.user_attrs["error"]
    for t in (elsewhere, mine, unowned):  # nothing proves these dead
        assert trials[t.number].state == TrialState.RUNNING
    retries = [t for t in trials if t.state == TrialState.WAITING]
    assert sorted(t.system_attrs["failed_trial"] for t in retries) == [alive.number, reused.number]
    for r in retries:  # the same settings, none of the dead attempt's record
        assert r.params == trials[r.system_attrs["failed_trial"]].params and r.user_attrs == {}
    assert orphans.reap(study, everywhere=True) == [elsewhere.number, unowned.number]  # --fail-stale
    assert study.get_trials()[mine.number].state == TrialState.RUNNING


def test_a_retry_that_dies_too_is_not_retried_again(tmp_path: Path) -> None:
    study = journal_study(tmp_path)
    first = _ask(study, "gone-host:1:1")
    orphans.reap(study, everywhere=True)
    retry = study.ask()  # pops the queued retry
    assert study.get_trials()[retry.number].system_attrs["failed_trial"] == first.number
    assert retry.params == first.params
    retry.set_user_attr(orphans.OWNER_ATTR, "gone-host:2:2")
    assert orphans.reap(study, everywhere=True) == [retry.number]
    assert not study.get_trials(states=(TrialState.WAITING,))


# ---------------------------------------------------------------- containers that share a hostname


CONTAINER = """
import sys, time
from autotune.study import orphans
from tests.support import journal_study
from pathlib import Path
study = journal_study(Path(sys.argv[1]))
t = study.ask()  # stamped by the storage, in this container's pid namespace
print(t.number, orphans.owner_id(), flush=True)
time.sleep(120)
"""


def _unshare() -> list[str] | None:
    """`unshare --pid --fork --mount-proc` where this machine lets us make a pid namespace (root, user namespaces)."""
    import shutil

    if shutil.which("unshare") is None:
        return None
    for cmd in (["unshare", "--pid", "--fork", "--mount-proc"],
                ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]):
        if subprocess.run([*cmd, "true"], capture_output=True).returncode == 0:
            return cmd
    return None


def test_a_trial_of_another_container_with_the_same_hostname_is_not_reaped(tmp_path: Path) -> None:
    """Two "containers": another pid namespace on this host (`--network host`: one hostname). Its worker's pid means
    nothing here (pid 1 or 2 of its namespace): its running trial is not failed from this one."""
    cmd = _unshare()
    if cmd is None:
        pytest.skip("no pid namespace can be made here (test_a_stamp_from_another_pid_namespace_is_not_reaped "
                    "simulates one)")
    study = journal_study(tmp_path)
    root = str(Path(__file__).resolve().parents[2])
    other = subprocess.Popen([*cmd, sys.executable, "-c", CONTAINER, str(tmp_path)], cwd=root, text=True,
                             stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": root})
    try:
        assert other.stdout is not None
        number, stamp = other.stdout.readline().split()
        owner = orphans.Owner.parse(stamp)
        assert owner is not None and owner.host == socket.gethostname() and owner.pid < 10  # its namespace's pid
        assert owner.scope != orphans.scope() and not owner.here()
        assert orphans.reap(study) == []
        assert study.get_trials()[int(number)].state == TrialState.RUNNING
    finally:
        other.kill()
        other.wait()


def test_a_stamp_from_another_pid_namespace_is_not_reaped(tmp_path: Path) -> None:
    """The same, simulated: a stamp with this hostname, a pid that is dead here, and another namespace's scope is
    left RUNNING; the same stamp in this namespace is proven dead and reaped."""
    study = journal_study(tmp_path)
    here, dead = socket.gethostname(), _sleeper()
    dead.kill()
    dead.wait()
    mine = orphans.scope()
    assert mine is not None
    boot, namespace = mine.split(".")
    container = _ask(study, f"{here}:{dead.pid}:12345:{boot}.{int(namespace) + 1}")
    other_boot = _ask(study, f"{here}:{dead.pid}:12345:{'0' * 12}.{namespace}")  # the same name, rebooted or
    this_one = _ask(study, f"{here}:{dead.pid}:12345:{mine}")  # another machine
    assert orphans.reap(study) == [this_one.number]
    trials = study.get_trials()
    assert trials[container.number].state == trials[other_boot.number].state == TrialState.RUNNING


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")
def test_sqlite_heartbeats_find_a_dead_owner_on_another_host(tmp_path: Path) -> None:
    """The only way to see a worker die elsewhere: its trial's heartbeat stops (SQLite too, not only servers)."""
    cfg = config.load(write_cfg(tmp_path, f"sqlite:///{tmp_path}/hb.db", 3, name="hb", single=True,
                                study_extra={"heartbeat_interval": 1, "grace_period": 3}))
    study = study_mod.open_study(cfg)
    assert orphans.heartbeats(study)
    ours, optunas = _ask(study, "another-host:4242:99"), _ask(study, "another-host:4243:99")
    for t in (ours, optunas):
        study._storage.record_heartbeat(t._trial_id)  # what the dead worker's heartbeat thread last did
    assert orphans.reap(study) == []  # fresh heartbeats: alive, as far as anyone can tell
    time.sleep(4.5)  # over the grace period (SQLite's clock has one-second steps)
    # Optuna fails stale trials itself before each trial (Study.optimize): its path must leave the reason too.
    optuna.storages.fail_stale_trials(study)
    assert orphans.reap(study) == []
    for t in (ours, optunas):
        dead = study.get_trials()[t.number]
        assert dead.state == TrialState.FAIL and dead.user_attrs["stop_reason"] == "orphaned"
        assert "no heartbeat from worker another-host:" in dead.user_attrs["error"]
    retries = study.get_trials(states=(TrialState.WAITING,))
    assert sorted(r.system_attrs["failed_trial"] for r in retries) == [ours.number, optunas.number]
    assert all(r.user_attrs == {} for r in retries)


# ---------------------------------------------------------------- a real `autotune run`, SIGKILL-ed mid-trial


@pytest.mark.slow  # (11 s of real processes: the default run stays under 10 minutes)
@pytest.mark.parametrize("storage", ["sqlite", "journal"])
def test_sigkilled_run_leaves_no_zombie_after_resume(storage: str, tmp_path: Path) -> None:
    epochs, n = 10, 3
    url = f"sqlite:///{tmp_path}/k.db" if storage == "sqlite" else f"journal:///{tmp_path}/k.log"
    path = write_cfg(tmp_path, url, n, name="k", epochs=epochs, single=True, data_fraction=0.5, batch_size=32)
    p = autotune("run", str(path), "--plain", cwd=tmp_path)
    try:
        study = _wait_study(path)
        t0 = time.monotonic()
        while not study.get_trials(states=(TrialState.COMPLETE,)) and time.monotonic() - t0 < 120:
            time.sleep(0.05)  # one completed trial that must survive
        victim = wait_mid_trial(study, epochs)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    finally:
        p.kill()
        p.communicate()
    done_before = {t.number: t.values for t in study.get_trials(states=(TrialState.COMPLETE,))}
    assert done_before
    study = load(path)
    assert study.trials[victim.number].state == TrialState.RUNNING  # the zombie, until a run resumes

    rc, out, err = finish(autotune("run", str(path), "--plain", cwd=tmp_path))
    assert rc == 0, err
    assert f"marked FAIL (orphaned) and queued for one retry each: {victim.number}" in err
    study = load(path)
    trials = study.get_trials()
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert len([t for t in trials if t.state in FINISHED]) == n
    for number, values in done_before.items():  # every completed trial is still there
        assert trials[number].state == TrialState.COMPLETE and trials[number].values == values
    dead = trials[victim.number]
    assert dead.state == TrialState.FAIL and dead.user_attrs["stop_reason"] == "orphaned"
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == victim.number]
    assert len(retries) == 1 and retries[0].state in FINISHED and retries[0].params == dead.params
    assert retries[0].user_attrs.get("stop_reason") != "orphaned"


def _wait_study(path: Path, timeout: float = 120) -> optuna.Study:
    cfg = config.load(path)
    storage = storage_mod.make_storage(cfg)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            return optuna.load_study(study_name=cfg.study.name, storage=storage)
        except KeyError:
            time.sleep(0.1)
    raise AssertionError("the study was never created")
