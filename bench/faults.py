"""Load with faults, measured here and now (not a test): W `autotune worker` processes on one study, a random
one SIGKILL-ed every K seconds and replaced by a fresh one, until the study holds its N finished trials.

Per storage (a journal file; PostgreSQL when AUTOTUNE_TEST_POSTGRES or --postgres is given, in a fresh
database, with heartbeats on as across machines) it checks what a study run this way must keep:
- exactly N finished trials, distinct trial numbers, nothing left RUNNING or WAITING;
- every trial a killed worker was running is FAIL with stop_reason `orphaned`, and retried once with the
  same settings (those it had drawn when it was killed; a retry that was killed too is not retried again);
- every trial seen COMPLETE at any kill is still COMPLETE with the same values at the end;
and prints trials per minute (N / wall time, worker start-ups and kills included), kills, retries, and
the time from each SIGKILL to its trial's FAIL (the time to detect a dead worker). Exit status 1 if a
check fails. Trials are tiny (an MLP on digits, 1 epoch) so the run is about the machinery, not training.

    python bench/faults.py                                  # 8 workers x 200 trials, a kill every 20 s
    python bench/faults.py --storage journal --trials 40 --workers 4 --kill-every 8 --json f.json

The journal lock (`--lock`, alone; also before every journal run): a process SIGKILLed while it holds the journal
file's lock (mid-append), then the time until another worker's next append succeeds, with Optuna's own
JournalFileSymlinkLock (waits out its 30 s grace period) and with autotune's (journal_lock.py: a dead owner on
this host is seen at once), against an append with the lock free, all measured in this run.

    python bench/faults.py --lock
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402
import yaml  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from autotune import config  # noqa: E402
from autotune.spec import TrialRecord  # noqa: E402
from autotune.study import orphans  # noqa: E402
from autotune.study import runner as study_mod  # noqa: E402
from autotune.study import storage as storage_mod  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def counted(t: Any) -> bool:
    """A finished trial of the study's budget: a surplus one (PRUNED, it lost the race for the last slot and never
    ran) is not."""
    return t.state in FINISHED and not TrialRecord.of(t).surplus


def write_config(folder: Path, url: str, n_trials: int, heartbeats: bool) -> Path:
    study: dict[str, Any] = {"name": "faults", "storage": url, "n_trials": n_trials, "seed": 0}
    if heartbeats:  # generous: 8 workers share 2 cores here, and a starved heartbeat thread must not look dead
        study.update(heartbeat_interval=2, grace_period=20)
    raw = {
        "study": study,
        "data": {"name": "digits"},
        "model": {"name": "mlp", "hidden": 32},
        "train": {"device": "cpu", "epochs": 1, "data_fraction": 0.3, "cpu_threads": 1},
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
                  "optimizer": {"type": "categorical", "choices": ["sgd", "adam"]},
                  "batch_size": {"type": "categorical", "choices": [32, 64]}},
    }
    path = folder / "faults.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


class Workers:
    """`autotune worker` processes, each logging to a file of its own (a pipe nobody reads would fill up)."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url, self.folder = url, folder
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    "OMP_NUM_THREADS": "1"}
        self.env.pop("AUTOTUNE_WORKER_INDEX", None)

    def start(self) -> subprocess.Popen[bytes]:
        log = open(self.folder / f"worker-{len(self.procs)}.log", "wb")
        p = subprocess.Popen([sys.executable, "-m", "autotune", "worker", "--storage", self.url, "--study", "faults",
                              "--threads", "1"], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(p)
        return p

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def stop(self) -> None:
        for p in self.alive():
            p.kill()
        for p in self.procs:
            p.wait()


def run(url: str, folder: Path, n_workers: int, n_trials: int, kill_every: float, seed: int, timeout: float,
        heartbeats: bool, kill_every_trials: int | None = None) -> dict[str, Any]:
    cfg = config.load(write_config(folder, url, n_trials, heartbeats))
    study = study_mod.open_study(cfg, fresh=True)
    rng = random.Random(seed)
    pool = Workers(url, folder)
    kills: list[dict[str, Any]] = []
    snapshots: dict[int, list[float] | None] = {}  # trials COMPLETE at some kill -> values
    t0 = time.monotonic()
    for _ in range(n_workers):
        pool.start()
    next_kill = t0 + kill_every
    next_kill_at = kill_every_trials  # or by progress: the same number of kills on a fast machine and a slow one
    try:
        while pool.alive() and time.monotonic() - t0 < timeout:
            time.sleep(0.05 if next_kill_at else 0.2)
            trials = study.get_trials(deepcopy=False) if next_kill_at else []
            done = sum(counted(t) for t in trials)
            if next_kill_at is not None:
                if done < next_kill_at or not any(t.state == TrialState.RUNNING for t in trials):
                    continue
                next_kill_at += kill_every_trials  # type: ignore[operator]
            else:
                if time.monotonic() < next_kill:
                    continue
                next_kill += kill_every
                trials = study.get_trials(deepcopy=False)
                done = sum(counted(t) for t in trials)
            if done >= n_trials:
                continue  # done: let the workers see it and exit
            # Any live worker, starting up or mid-trial; until one has died mid-trial, one mid-trial if there is one
            # (so every run tests a killed trial). Always picking one mid-trial would starve a loaded machine: the
            # only worker past its start-up would be killed each time and the study would stop moving.
            busy = {o.pid for t in trials if t.state == TrialState.RUNNING and (o := orphans.owner_of(t))}
            alive = pool.alive()
            first = not any(k["running"] for k in kills)
            victim = rng.choice([p for p in alive if first and p.pid in busy] or alive)
            snapshots.update({t.number: t.values for t in trials if t.state == TrialState.COMPLETE})
            running = [t.number for t in trials if t.state == TrialState.RUNNING
                       and (o := orphans.owner_of(t)) is not None and o.pid == victim.pid]
            os.kill(victim.pid, signal.SIGKILL)
            kills.append({"pid": victim.pid, "at": datetime.now().isoformat(), "running": running,
                          "t": time.monotonic() - t0})
            victim.wait()
            pool.start()  # a fresh worker takes its place, as a supervisor (Kubernetes, systemd) would
    finally:
        timed_out = bool(pool.alive())
        pool.stop()
    wall = time.monotonic() - t0
    return check(optuna.load_study(study_name="faults", storage=storage_mod.make_storage(cfg)), n_trials, kills,
                 snapshots, pool, wall, timed_out, folder)


def check(study: optuna.Study, n_trials: int, kills: list[dict[str, Any]], snapshots: dict[int, Any],
          pool: Workers, wall: float, timed_out: bool, folder: Path) -> dict[str, Any]:
    trials = study.get_trials(deepcopy=False)
    by_number = {t.number: t for t in trials}
    problems: list[str] = []
    finished = [t for t in trials if counted(t)]
    if timed_out:
        problems.append(f"workers still running after the timeout ({wall:.0f}s)")
    if len(finished) != n_trials:
        problems.append(f"{len(finished)} finished trials, not {n_trials}")
    if len({t.number for t in trials}) != len(trials):
        problems.append("trial numbers repeat")
    stuck = [t.number for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    if stuck:
        problems.append(f"left RUNNING or WAITING: {stuck}")
    killed_pids = {k["pid"] for k in kills}
    kill_time = {k["pid"]: datetime.fromisoformat(k["at"]) for k in kills}
    retries = {t.system_attrs["failed_trial"]: t for t in trials if "failed_trial" in t.system_attrs}
    detect: list[float] = []
    orphaned = []
    for t in trials:
        o = orphans.owner_of(t)
        record = TrialRecord.of(t)
        if o is None or o.pid not in killed_pids or t.state in FINISHED or record.surplus:
            continue
        orphaned.append(t.number)
        if t.state != TrialState.FAIL or record.stop_reason != "orphaned":
            problems.append(f"trial {t.number} of killed worker {o.pid}: {t.state.name} {record.stop_reason}")
            continue
        if t.datetime_complete is not None:
            detect.append((t.datetime_complete - kill_time[o.pid]).total_seconds())
        first = t.system_attrs.get("failed_trial")
        if first is None:  # an original trial: retried once with the settings it had drawn (all of them, unless
            r = retries.get(t.number)  # it was killed while sampling: then the rest are drawn in the retry)
            if r is None or any(r.params.get(k) != v for k, v in t.params.items()):
                problems.append(f"killed trial {t.number} has no retry with its settings")
        elif sum(1 for x in trials if x.system_attrs.get("failed_trial") == first) != 1:
            problems.append(f"retry {t.number} of trial {first} was retried again")
    # Seen RUNNING just before a SIGKILL: failed as orphaned, or finished in the instant between the look
    # and the kill (its result was stored; nothing to retry).
    seen_running = {n for k in kills for n in k["running"]}
    raced = sorted(n for n in seen_running if counted(by_number[n]))
    missing = sorted(seen_running - set(orphaned) - set(raced))
    if missing:
        problems.append("trials running at a kill, neither finished nor failed as orphaned: "
                        + ", ".join(f"{n} {by_number[n].state.name}" for n in missing))
    lost = [n for n, v in snapshots.items() if by_number[n].state != TrialState.COMPLETE or by_number[n].values != v]
    if lost:
        problems.append(f"completed trials lost or changed: {lost}")
    bad_exits = [i for i, p in enumerate(pool.procs) if p.pid not in killed_pids and p.returncode != 0]
    tracebacks = [f.name for f in folder.glob("worker-*.log") if b"Traceback" in f.read_bytes()]
    if bad_exits or tracebacks:
        problems.append(f"workers {bad_exits} exited non-zero; tracebacks in {tracebacks}")
    return {
        "finished": len(finished), "trials": len(trials), "wall_s": wall, "trials_per_min": 60 * len(finished) / wall,
        "kills": len(kills), "killed_mid_trial": len(orphaned), "finished_as_killed": raced, "retries": len(retries),
        "surplus": sum(1 for t in trials if TrialRecord.of(t).surplus),
        "failed": sum(1 for t in trials if t.state == TrialState.FAIL),
        "detect_s": detect, "workers_started": len(pool.procs), "problems": problems,
    }


LOCK_HOLDER = """
import sys, time
from optuna.storages.journal import JournalFileSymlinkLock
from autotune.study.journal_lock import OwnedJournalLock
path, kind = sys.argv[1], sys.argv[2]
(OwnedJournalLock(path) if kind == "autotune" else JournalFileSymlinkLock(path)).acquire()
print("held", flush=True)
time.sleep(600)
"""


def lock_scenario(folder: Path, repeats: int = 3) -> dict[str, Any]:
    """Seconds from the SIGKILL of a process holding the journal's lock to another process's next append, per
    lock (Optuna's once: it costs its 30 s grace period), and of an append with the lock free."""

    def storage(path: Path, kind: str) -> optuna.storages.BaseStorage:
        if kind == "autotune":  # as every autotune run path opens a journal
            return storage_mod.make_storage(config.from_dict({"study": {"storage": f"journal:///{path}"}}))
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))

    out: dict[str, Any] = {}
    for kind, n in (("optuna", 1), ("autotune", repeats)):
        waits, free = [], []
        for i in range(n):
            path = folder / f"lock-{kind}-{i}.log"
            study = optuna.create_study(study_name="lock", storage=storage(path, kind))
            t0 = time.perf_counter()
            study.set_user_attr("free", i)  # one append, the lock free
            free.append(time.perf_counter() - t0)
            holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(path), kind], cwd=ROOT,
                                      stdout=subprocess.PIPE, text=True)
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            t0 = time.perf_counter()
            study.set_user_attr("after_kill", i)  # the next append of a worker that outlived it
            waits.append(time.perf_counter() - t0)
        out[kind] = {"after_kill_s": waits, "free_s": free}
    return out


def print_lock(r: dict[str, Any]) -> None:
    free = statistics.median(r["autotune"]["free_s"] + r["optuna"]["free_s"])
    ours, theirs = statistics.median(r["autotune"]["after_kill_s"]), statistics.median(r["optuna"]["after_kill_s"])
    print(f"journal lock: a holder SIGKILLed mid-append; the next append of another worker after {theirs:.2f}s "
          f"with Optuna's lock, {ours:.3f}s with autotune's (median of {len(r['autotune']['after_kill_s'])}): "
          f"{theirs / ours:.0f}x shorter; an append with the lock free takes {1e3 * free:.1f} ms "
          f"(autotune's wait = {ours / free:.1f}x that)")


def fresh_postgres(base: str) -> tuple[str, Any]:
    import psycopg

    plain = base.replace("postgresql+psycopg://", "postgresql://")
    db = f"autotune_faults_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')

    def drop() -> None:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

    return f"{plain.rpartition('/')[0]}/{db}", drop


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", choices=["journal", "postgres", "both"], default="both")
    ap.add_argument("--postgres", default=os.environ.get("AUTOTUNE_TEST_POSTGRES"),
                    help="server URL (a fresh database is made there and dropped), or a database to use as is "
                         "with --keep; default $AUTOTUNE_TEST_POSTGRES")
    ap.add_argument("--keep", action="store_true", help="use --postgres as given and keep it, and keep --dir")
    ap.add_argument("--dir", help="folder for the journal file, config and worker logs (default: a temporary one)")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--kill-every", type=float, default=20.0, help="seconds between kills")
    ap.add_argument("--kill-every-trials", type=int, help="kill after every this many finished trials instead "
                                                          "(what the slow test does: as many kills on any machine)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--lock", action="store_true", help="only the journal lock's scenario (about 35 s)")
    args = ap.parse_args()
    kinds = ["journal", "postgres"] if args.storage == "both" else [args.storage]
    results: dict[str, Any] = {}
    if args.lock or "journal" in kinds:
        with tempfile.TemporaryDirectory(prefix="autotune-faults-lock-") as d:
            results["journal_lock"] = lock_scenario(Path(d))
        print_lock(results["journal_lock"])
    if args.lock:
        kinds = []
    for kind in kinds:
        if kind == "postgres" and not args.postgres:
            print("postgres: skipped (no --postgres and no AUTOTUNE_TEST_POSTGRES)")
            continue
        folder = Path(args.dir) / kind if args.dir else Path(tempfile.mkdtemp(prefix=f"autotune-faults-{kind}-"))
        folder.mkdir(parents=True, exist_ok=True)
        drop = None
        if kind == "journal":
            url = f"journal:///{folder / 'faults.log'}"
        elif args.keep:
            url = args.postgres
        else:
            url, drop = fresh_postgres(args.postgres)
        try:
            r = run(url, folder, args.workers, args.trials, args.kill_every, args.seed, args.timeout,
                    heartbeats=kind == "postgres", kill_every_trials=args.kill_every_trials)
        finally:
            if drop is not None:
                drop()
        results[kind] = {**r, "url": url if kind == "journal" else "postgres"}
        d = sorted(r["detect_s"])
        detect = (f"median {statistics.median(d):.2f}s, max {max(d):.2f}s over {len(d)}" if d else "no trial killed")
        every = f"{args.kill_every_trials} finished trials" if args.kill_every_trials else f"{args.kill_every:g}s"
        print(f"{kind}: {args.workers} workers x {args.trials} trials, SIGKILL every {every}: "
              f"{r['finished']} finished in {r['wall_s']:.0f}s = {r['trials_per_min']:.0f} trials/min; "
              f"{r['kills']} kills ({r['killed_mid_trial']} mid-trial), {r['retries']} retries, "
              f"{r['surplus']} surplus, {r['failed']} FAIL in all; time to detect a dead worker: {detect}; "
              f"{r['workers_started']} worker processes started")
        print(f"{kind}: " + ("all checks hold" if not r["problems"] else "PROBLEMS: " + "; ".join(r["problems"])))
    if args.json:
        Path(args.json).write_text(json.dumps(results))
    return 1 if any(r.get("problems") for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
