"""Many workers on one study: exact budgets, SIGKILL-ed workers, resume, refused SQLite, reproducibility.

Real processes and real training (tiny MLPs on digits). The PostgreSQL tests need the server that
`.ci/start_postgres.sh` starts (URL in AUTOTUNE_TEST_POSTGRES); each gets a database of its own.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autotune import config
from autotune.cli import app as cli
from autotune.core.errors import ConfigError
from autotune.study import budget, orphans, workers
from autotune.study import runner as study_mod
from autotune.study import storage as storage_mod
from tests.support import FINISHED, assert_exact, env, finish, load, tiny, wait_mid_trial, write_cfg
from tests.support import fake_gpus as _fake_gpus
from tests.support import start_autotune as autotune

ROOT = Path(__file__).resolve().parents[2]
optuna.logging.set_verbosity(optuna.logging.WARNING)


# ---------------------------------------------------------------- helpers


def pid_of(t: optuna.trial.FrozenTrial) -> int:
    owner = orphans.owner_of(t)
    assert owner is not None and owner.host == socket.gethostname()
    return owner.pid


# ---------------------------------------------------------------- refusals and planning


def test_sqlite_with_several_workers_is_refused_before_anything_is_written(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "s.db"
    path = write_cfg(tmp_path, f"sqlite:///{db}", 4)
    assert cli.main(["run", str(path), "--workers", "2", "--plain"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "study.storage: SQLite cannot take 2 concurrent workers" in err
    assert "journal:///" in err and "postgresql://" in err
    assert not db.exists()
    assert cli.main(["worker", "--storage", f"sqlite:///{db}", "--study", "w"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "journal:///" in err and "postgresql://" in err
    assert not db.exists()


def test_plan_cpu_shares_cores_and_rejects_bad_requests(tmp_path: Path) -> None:
    cfg = config.load(write_cfg(tmp_path, f"journal:///{tmp_path}/j.log", 4))
    slots = workers.slots_for(cfg, 2, None)
    assert [s.index for s in slots] == [0, 1]
    assert all(s.gpu is None and s.threads == max(1, workers.cpu_cores() // 2) for s in slots)
    assert slots[0].env()["OMP_NUM_THREADS"] == str(slots[0].threads)
    with pytest.raises(ConfigError, match=r"--workers: must be >= 1"):
        workers.slots_for(cfg, 0, None)
    with pytest.raises(ConfigError, match=r"--gpus: train\.device is cpu"):
        workers.slots_for(cfg, 2, ["0", "1"])
    gpu_cfg = config.load(write_cfg(tmp_path, f"journal:///{tmp_path}/j.log", 4, name="g", device="auto"))
    with pytest.raises(ConfigError, match=r"--gpus: 3 workers need 3 GPU indices, got 2"):
        workers.slots_for(gpu_cfg, 3, ["0", "0"])
    if not workers.visible_gpus():
        with pytest.raises(ConfigError, match=r"--gpus: GPU 0 is not visible; 0 visible"):
            workers.slots_for(gpu_cfg, 1, ["0"])


def _check_placement(groups: list[str | None], n_workers: int | None, per: int, visible: list[str]) -> None:
    """What `place` promises without --gpus: each worker a group of `per` distinct visible GPUs, no GPU in two
    groups, so workers x devices never exceeds the GPUs visible."""
    used = [g for group in groups for g in str(group).split(",")]
    assert all(group is not None and len(group.split(",")) == per for group in groups)
    assert len(used) == len(set(used)) == len(groups) * per <= len(visible)
    assert set(used) <= set(visible)
    assert len(groups) == (n_workers or max(1, len(visible) // per))


@pytest.mark.parametrize("visible", [["0"], ["3", "5"], ["2", "4", "6", "7", "9"], [str(i) for i in range(8)]])
def test_gpu_placement_never_oversubscribes(visible: list[str]) -> None:
    """The pure planner, given what a machine shows: every request it accepts keeps one trial's devices on
    distinct GPUs and two workers off one GPU; every request it cannot meet is a one-line ConfigError."""
    for per in (1, 2, 3):
        for n_workers in (None, 1, 2, 3, 5, 8, 9):
            try:
                groups = workers.place("w.yaml", "cuda", n_workers, None, per, visible, cores=16)
            except ConfigError as e:
                assert (n_workers or 1) * per > len(visible)  # refused only when it does not fit
                assert e.key_path == "--workers" and "\n" not in str(e)
                assert re.search(rf"but {len(visible)} (GPU\(s\) )?visible", e.message) and "give --gpus" in e.message
                continue
            _check_placement(groups, n_workers, per, visible)
    assert workers.place("w.yaml", "auto", None, None, 1, visible, cores=16) == visible  # one worker per GPU


def test_gpu_placement_shares_a_gpu_only_when_asked() -> None:
    visible = ["3", "5", "6", "7"]
    # --gpus indexes into the visible GPUs; a repeated index is the only way two workers share one
    assert workers.place("w.yaml", "cuda", None, ["0", "0", "1", "1"], 1, visible, cores=16) == ["3", "3", "5", "5"]
    assert workers.place("w.yaml", "cuda", None, ["1", "2", "1", "2"], 2, visible, cores=16) == ["5,6", "5,6"]
    assert workers.place("w.yaml", "cuda", 2, ["3", "0", "1", "2"], 2, visible, cores=16) == ["7,3", "5,6"]
    with pytest.raises(ConfigError, match=r"--gpus: worker 1's trials would put two ranks on GPU 2"):
        workers.place("w.yaml", "cuda", 2, ["0", "1", "2", "2"], 2, visible, cores=16)
    with pytest.raises(ConfigError, match=r"--gpus: GPU 4 is not visible; 4 visible \(0, 1, 2, 3\)"):
        workers.place("w.yaml", "cuda", 1, ["4"], 1, visible, cores=16)
    with pytest.raises(ConfigError, match=r"--gpus: must be GPU indices like 0,1,2; got '0,x'"):
        workers.place("w.yaml", "cuda", None, ["0", "x"], 1, visible, cores=16)
    # device cuda:N: one worker, alone on the N-th visible GPU
    assert workers.place("w.yaml", "cuda:2", None, None, 1, visible, cores=16) == ["6"]
    with pytest.raises(ConfigError, match=r"train\.device: cuda:1 picks one GPU; with devices 2"):
        workers.place("w.yaml", "cuda:1", None, None, 2, visible, cores=16)
    # no GPU visible (or the CPU asked for): workers x devices processes within the cores
    assert workers.place("w.yaml", "auto", 3, None, 1, [], cores=2) == [None, None, None]
    assert workers.place("w.yaml", "cpu", 2, None, 2, visible, cores=4) == [None, None]
    with pytest.raises(ConfigError, match=r"--workers: 3 workers x devices 2 = 6 processes but 4 CPU core\(s\)"):
        workers.place("w.yaml", "cpu", 3, None, 2, [], cores=4)


def test_plan_splits_the_cores_over_gpu_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """plan() on a faked machine (6 GPUs as CUDA_VISIBLE_DEVICES=1,2,3,4,5,6 sets them, 12 cores): what place()
    decides, threads shared out, CUDA never touched."""
    calls = _fake_gpus(monkeypatch, "1,2,3,4,5,6")
    monkeypatch.setattr(workers, "cpu_cores", lambda: 12)
    cfg = config.load(write_cfg(tmp_path, f"journal:///{tmp_path}/j.log", 4, device="cuda", devices=2))
    slots = workers.slots_for(cfg, None, None)
    assert [(s.gpu, s.threads) for s in slots] == [("1,2", 4), ("3,4", 4), ("5,6", 4)]
    assert [s.env()["CUDA_VISIBLE_DEVICES"] for s in slots] == ["1,2", "3,4", "5,6"]
    with pytest.raises(ConfigError, match=r"--workers: 4 workers x devices 2 need 8 GPUs but 6 visible"):
        workers.slots_for(cfg, 4, None)
    assert calls == []


def test_cuda_n_is_mapped_to_cuda_0_in_its_pinned_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Physical GPUs 3 and 5 visible: `cuda:1` is GPU 5; its worker sees it alone (CUDA_VISIBLE_DEVICES=5) as cuda:0."""
    _fake_gpus(monkeypatch, "3,5")
    cfg = config.load(write_cfg(tmp_path, f"journal:///{tmp_path}/j.log", 2, device="cuda:1"))
    slots = workers.slots_for(cfg, None, None)
    assert [(s.index, s.gpu) for s in slots] == [(0, "5")]
    assert slots[0].env()["CUDA_VISIBLE_DEVICES"] == "5"
    mapped = workers.worker_config(cfg.to_dict(), slots[0])
    assert mapped["train"]["device"] == "cuda:0"
    assert config.from_dict(mapped, source=cfg.source).fixed()["device"] == "cuda:0"
    assert cfg.to_dict()["train"]["device"] == "cuda:1"  # the study stores what the user wrote
    assert workers.slots_for(cfg, 1, None)[0].gpu == "5"
    with pytest.raises(ConfigError, match=r"train\.device: cuda:1 puts every worker on one GPU"):
        workers.slots_for(cfg, 2, None)
    with pytest.raises(ConfigError, match=r"--gpus: train\.device cuda:1 already picks the GPU"):
        workers.slots_for(cfg, None, ["0"])
    far = config.load(write_cfg(tmp_path, f"journal:///{tmp_path}/j.log", 2, name="far", device="cuda:2"))
    with pytest.raises(ConfigError, match=r"train\.device: cuda:2 is not visible; 2 CUDA GPU\(s\) visible"):
        workers.slots_for(far, None, None)
    plain = config.load(write_cfg(tmp_path, f"journal:///{tmp_path}/j.log", 2, name="plain", device="cuda"))
    slots = workers.slots_for(plain, None, None)
    assert [s.gpu for s in slots] == ["3", "5"]
    assert workers.worker_config(plain.to_dict(), slots[1]) == plain.to_dict()  # plain cuda needs no mapping


@pytest.mark.slow
def test_the_driver_of_gpu_workers_never_initialises_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: Any) -> None:
    """The checks that touch the device (a fixed bf16 tries autocast on it; the device's name) run in a spawned
    child pinned like the first worker, so the driver holds no CUDA context (and no GPU memory) all study long.
    Here the driver believes in one GPU while its children, on this CPU-only torch, resolve `auto` to the CPU."""
    calls = _fake_gpus(monkeypatch, "0")
    path = write_cfg(tmp_path, f"journal:///{tmp_path}/d.log", 2, name="d", single=True, device="auto",
                     precision="bf16")
    assert cli.main(["run", str(path), "--workers", "1", "--plain"]) == 0, capsys.readouterr().err
    assert calls == []
    study = load(path)
    assert len(study.get_trials(states=FINISHED)) == 2
    assert study.user_attrs["device"].startswith("cpu")  # the child's answer, not the driver's


def test_a_device_check_error_in_the_child_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: Any) -> None:
    calls = _fake_gpus(monkeypatch, "0")
    log = tmp_path / "e.log"
    path = write_cfg(tmp_path, f"journal:///{log}", 2, name="e", device="cuda:0")
    assert cli.main(["run", str(path), "--workers", "1", "--plain"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "e.yaml: train.device: device 'cuda:0' is not available" in err
    assert calls == [] and not log.exists()  # nothing written


def test_stored_config_rebuilds_the_run_config(tmp_path: Path) -> None:
    path = write_cfg(tmp_path, f"journal:///{tmp_path}/j.log", 2)
    cfg = config.load(path)
    study_mod.open_study(cfg)
    joined = workers.join_config(f"journal:///{tmp_path}/j.log", "w")
    assert joined.to_dict() == cfg.to_dict()
    with pytest.raises(ConfigError, match=r"--study: no study 'nope' .* known: w"):
        workers.join_config(f"journal:///{tmp_path}/j.log", "nope")


def test_heartbeats_on_a_journal_are_refused(tmp_path: Path) -> None:
    cfg = config.load(write_cfg(tmp_path, f"journal:///{tmp_path}/h.log", 2, study_extra={"heartbeat_interval": 5}))
    with pytest.raises(ConfigError, match=r"study\.heartbeat_interval: the journal backend has no heartbeats"):
        storage_mod.make_storage(cfg)


# ---------------------------------------------------------------- the budget is exact


def test_one_worker_with_a_fixed_seed_proposes_the_same_settings(tmp_path: Path) -> None:
    def params(name: str, seed: int, via_worker: bool) -> list[tuple[dict[str, Any], int]]:
        cfg = config.load(write_cfg(tmp_path, f"journal:///{tmp_path}/{name}.log", 3, name=name,
                                    study_extra={"seed": seed}))
        if via_worker:  # what `autotune run --workers 1` runs in its one child
            study_mod.open_study(cfg)
            study = workers.run_worker(cfg, sampler_seed_offset=0).study
        else:
            study = study_mod.run(cfg)
        return [(t.params, t.user_attrs["seed"]) for t in sorted(study.trials, key=lambda t: t.number)]

    a = params("a", 7, via_worker=False)
    b = params("b", 7, via_worker=True)
    assert len(a) == 3 and a == b
    assert [p for p, _ in params("c", 8, via_worker=False)] != [p for p, _ in a]


def test_a_worker_loop_leaves_the_process_as_it_was(tmp_path: Path) -> None:
    """No freeze of the collector, warning filter or signal handler outlives `run_worker` (`autotune worker` runs
    it in the user's process)."""
    import gc
    import warnings

    def state() -> tuple[Any, ...]:
        return gc.get_freeze_count(), list(warnings.filters), signal.getsignal(signal.SIGTERM), list(sys.path)

    cfgs = [config.load(write_cfg(tmp_path, f"journal:///{tmp_path}/{n}.log", 1, name=n)) for n in ("w1", "w2")]
    with warnings.catch_warnings():
        warnings.resetwarnings()  # without pytest's own filter for ExperimentalWarning
        study_mod.open_study(cfgs[0])
        workers.run_worker(cfgs[0])  # first-use imports
        before = state()
        study_mod.open_study(cfgs[1])
        assert workers.run_worker(cfgs[1]).ran == 1
        assert state() == before and before[0] == 0
        assert not any(f[2] is optuna.exceptions.ExperimentalWarning for f in warnings.filters)


# ---------------------------------------------------------------- PostgreSQL


@pytest.mark.postgres
@pytest.mark.slow
def test_four_workers_on_postgres_finish_exactly_forty_trials(tmp_path: Path, pg_url: str) -> None:
    path = write_cfg(tmp_path, pg_url, 40, name="forty")
    t0 = time.perf_counter()
    rc, out, err = finish(autotune("run", str(path), "--workers", "4", "--plain", cwd=tmp_path))
    assert rc == 0, err
    study = load(path)
    done = assert_exact(study, 40)
    owners = {t.user_attrs[workers.WORKER_ATTR] for t in done}
    assert len(owners) >= 2, owners  # the trials were shared out (four on an idle machine)
    assert "4 worker(s)" in out and "Pareto front" in out
    c = budget.counts(study.get_trials())
    assert f"({len(study.get_trials(states=(TrialState.COMPLETE,)))} complete" in out and c.finished == 40
    print(f"4 workers x 40 trials on PostgreSQL: {time.perf_counter() - t0:.1f}s, {len(owners)} workers ran trials")


@pytest.mark.slow  # (7-14 s of real processes: the default run stays under 10 minutes)
@pytest.mark.postgres
def test_sigkilled_worker_trial_fails_within_grace_period_and_is_retried(tmp_path: Path, pg_url: str) -> None:
    grace = 3
    epochs = 10
    path = write_cfg(tmp_path, pg_url, 4, name="kill", epochs=epochs, single=True, data_fraction=0.5, batch_size=32,
                     study_extra={"heartbeat_interval": 1, "grace_period": grace})
    p = autotune("run", str(path), "--workers", "2", "--plain", cwd=tmp_path)
    try:
        study = optuna.load_study(study_name="kill", storage=_wait_storage(path))
        victim = wait_mid_trial(study, epochs)
        done_before = {t.number: t.values for t in study.get_trials(states=(TrialState.COMPLETE,))}
        os.kill(pid_of(victim), signal.SIGKILL)
        killed_at = datetime.now()
        rc, out, err = finish(p)
    finally:
        p.kill()
    assert rc == 0, err
    assert "killed by SIGKILL" in err
    study = load(path)
    done = assert_exact(study, 4)
    dead = study.trials[victim.number]
    assert dead.state == TrialState.FAIL
    failed_after = (dead.datetime_complete - killed_at).total_seconds()
    assert failed_after <= grace + 5, failed_after  # found by the survivor's heartbeat check
    retries = [t for t in study.trials if t.system_attrs.get("failed_trial") == victim.number]
    assert len(retries) == 1 and retries[0].state in FINISHED
    assert retries[0].params == dead.params  # retried once with the same settings
    for number, values in done_before.items():  # no completed trial lost
        assert study.trials[number].state == TrialState.COMPLETE and study.trials[number].values == values
    assert len(done) == 4


@pytest.mark.slow  # ~70 s: keeps the default suite's PostgreSQL part well under 3 minutes (run with -m slow)
@pytest.mark.postgres
def test_resume_after_the_driver_is_killed(tmp_path: Path, pg_url: str) -> None:
    n = 30  # room to spare: on a fast machine 10 trials could all end before the first look
    path = write_cfg(tmp_path, pg_url, n, name="resume", epochs=4, single=True, data_fraction=0.5,
                     study_extra={"heartbeat_interval": 1, "grace_period": 2})
    p = autotune("run", str(path), "--workers", "2", "--plain", cwd=tmp_path)
    try:
        study = optuna.load_study(study_name="resume", storage=_wait_storage(path))
        t0 = time.monotonic()
        while time.monotonic() - t0 < 240:  # two trials done (and more in flight): kill the driver now
            if len(study.get_trials(states=(TrialState.COMPLETE,))) >= 2:
                break
            time.sleep(0.02)
        p.send_signal(signal.SIGKILL)  # the driver; its workers follow (parent-death signal)
        p.wait()
    finally:
        p.kill()
        p.communicate()
    before = {t.number: t.values for t in study.get_trials(states=(TrialState.COMPLETE,))}
    assert 2 <= len(before) < n
    _wait_no_running_pids(study)
    rc, out, err = finish(autotune("run", str(path), "--workers", "2", "--plain", cwd=tmp_path))
    assert rc == 0, err
    study = load(path)
    assert_exact(study, n)
    for number, values in before.items():
        assert study.trials[number].state == TrialState.COMPLETE and study.trials[number].values == values


def _wait_storage(path: Path, timeout: float = 90) -> optuna.storages.BaseStorage:
    """The study's storage once the driver has created the study."""
    cfg = config.load(path)
    storage = storage_mod.make_storage(cfg)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cfg.study.name in {s.study_name for s in optuna.get_all_study_summaries(storage)}:
            return storage
        time.sleep(0.1)
    raise AssertionError("the study was never created")


def _wait_no_running_pids(study: optuna.Study, timeout: float = 30) -> None:
    """The killed driver's workers exit (SIGTERM from the parent-death signal)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        alive = [t for t in study.get_trials(states=(TrialState.RUNNING,))
                 if (o := orphans.owner_of(t)) is not None and o.alive()]
        if not alive:
            return
        time.sleep(0.1)
    raise AssertionError("the killed driver's workers kept running")


# ---------------------------------------------------------------- journal (no heartbeats)


@pytest.mark.slow
def test_journal_sigkilled_worker_is_seen_by_its_sibling_on_this_host(tmp_path: Path) -> None:
    epochs = 10
    path = write_cfg(tmp_path, f"journal:///{tmp_path}/k.log", 3, name="jk", epochs=epochs, single=True,
                     data_fraction=0.5, batch_size=32)
    p = autotune("run", str(path), "--workers", "2", "--plain", cwd=tmp_path)
    try:
        study = optuna.load_study(study_name="jk", storage=_wait_storage(path))
        victim = wait_mid_trial(study, epochs)
        os.kill(pid_of(victim), signal.SIGKILL)
        rc, out, err = finish(p)
    finally:
        p.kill()
    assert rc == 0, err
    study = load(path)
    assert_exact(study, 3)
    dead = study.trials[victim.number]
    assert dead.state == TrialState.FAIL and "died mid-trial" in dead.user_attrs["error"]
    retries = [t for t in study.trials if t.system_attrs.get("failed_trial") == victim.number]
    assert len(retries) == 1 and retries[0].state in FINISHED and retries[0].params == dead.params


def test_journal_cannot_see_a_dead_worker_on_another_host_until_fail_stale(tmp_path: Path, capsys: Any) -> None:
    """No heartbeats: a trial RUNNING for a worker elsewhere looks alive forever; --fail-stale clears it."""
    url = f"journal:///{tmp_path}/o.log"
    path = write_cfg(tmp_path, url, 3, name="jo", single=True)
    cfg = config.load(path)
    study = study_mod.open_study(cfg)
    ghost = study.ask()  # a worker on another machine took this trial and died
    ghost.set_user_attr(workers.WORKER_ATTR, "another-host:4242")
    # The CLI in this process (no second torch start-up): the ghost's owner is not this process either way.
    assert cli.main(["worker", "--storage", url, "--study", "jo"]) == 0
    study = load(path)
    assert study.trials[ghost.number].state == TrialState.RUNNING  # it cannot tell
    assert len(study.get_trials(states=FINISHED)) == 2  # the ghost holds the third slot
    capsys.readouterr()
    assert cli.main(["worker", "--storage", url, "--study", "jo", "--fail-stale"]) == 0
    err = capsys.readouterr().err
    assert f"failed 1 stale RUNNING trial(s) and queued their retries: {ghost.number}" in err
    study = load(path)
    assert study.trials[ghost.number].state == TrialState.FAIL
    assert_exact(study, 3)


def test_a_worker_stops_after_repeated_identical_failures(tmp_path: Path) -> None:
    """FAIL trials do not count toward the budget: a worker whose every trial fails the same way must stop
    (study.max_repeated_errors), not fail trials forever."""
    from autotune.study.outcome import RepeatedFailure

    cfg = config.from_dict({"study": {"name": "f", "storage": f"journal:///{tmp_path}/f.log", "n_trials": 20,
                                      "max_repeated_errors": 2},
                            "trainer": "tests.user_fits:fit_raises", "train": {"epochs": 1}},
                           source=str(tmp_path / "f.yaml"))
    study_mod.open_study(cfg)
    with pytest.raises(RepeatedFailure, match=r"2 trials in a row failed with KeyError: 'depth'"):
        workers.run_worker(cfg)
    trials = study_mod.open_study(cfg, create=False).trials
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"]


# ---------------------------------------------------------------- no immortal workers


STUCK = """
import os, signal, sys, threading, time
from autotune.core import lifetime
lifetime.as_program()  # (a worker process autotune spawned)
lifetime.EXIT_GRACE_S = 1.0
signal.signal(signal.SIGTERM, lifetime.interrupt)
lock = threading.Lock()
try:
    print("ready", flush=True)
    time.sleep(120)
except KeyboardInterrupt:  # what code interrupted inside a lock's critical section does next: wait forever
    lock.acquire()
    lock.acquire()
"""

ORPHANED = """
import multiprocessing as mp, os, signal, sys, time
from autotune.core import lifetime

def child(parent):
    lifetime.as_program()  # (a worker process autotune spawned)
    lifetime.EXIT_GRACE_S = 1.0
    signal.signal(signal.SIGTERM, lifetime.interrupt)  # no parent-death signal: as if it were lost
    lifetime.watch_parent(parent)
    time.sleep(120)

if __name__ == "__main__":
    p = mp.get_context("spawn").Process(target=child, args=(os.getpid(),))
    p.start()
    print(p.pid, flush=True)
    time.sleep(120)
"""


def test_a_terminated_worker_stuck_on_a_lock_still_ends(tmp_path: Path) -> None:
    p = subprocess.Popen([sys.executable, "-c", STUCK], env=env(), text=True, stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        p.kill()
        p.communicate()


def test_a_worker_whose_driver_died_ends_even_without_the_parent_death_signal(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(ORPHANED)
    driver = subprocess.Popen([sys.executable, str(script)], env=env(), text=True, stdout=subprocess.PIPE)
    try:
        assert driver.stdout is not None
        child = int(driver.stdout.readline())
        time.sleep(1.0)  # the child is up and watching
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 60
        while orphans.Owner(socket.gethostname(), child, None).alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not orphans.Owner(socket.gethostname(), child, None).alive()
    finally:
        driver.kill()
        driver.communicate()


def test_a_worker_starts_and_finishes_its_run_callbacks(tmp_path: Path) -> None:
    """`autotune worker`'s tracker: started once the study is open, told each trial this worker ran, finished
    as FINISHED when the study is done (None, the study goes on, when the worker only runs out of time)."""
    events: list[tuple[str, object]] = []

    class Hook:
        def start(self, study: optuna.Study) -> None:
            events.append(("start", len(study.trials)))

        def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            events.append(("trial", trial.number))

        def finish(self, study: optuna.Study, status: str | None = "FINISHED") -> None:
            events.append(("finish", status))

    cfg = tiny(tmp_path, study={"storage": f"journal:///{tmp_path}/h.log", "n_trials": 2}, train={"epochs": 1})
    study_mod.open_study(cfg)
    workers.run_worker(cfg, callbacks=[Hook()])
    assert events == [("start", 0), ("trial", 0), ("trial", 1), ("finish", "FINISHED")]
    events.clear()
    short = config.from_dict(cfg.to_dict(), overrides={"study.n_trials": 5, "study.timeout": 0.01}, source=cfg.source)
    workers.run_worker(short, callbacks=[Hook()])
    assert events[0] == ("start", 2) and events[-1] == ("finish", None)
