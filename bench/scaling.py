"""How autotune scales out, measured here and now (not a test).

1. Throughput: finished trials per minute of a real small study (CNN on digits) with 1 and 2 worker
   processes (`autotune run --workers N`: spawned processes, threads = cores // N each) on a journal
   file; the ratio to the 1-worker run is the speed-up. Wall time includes process start-up; the
   steady rate counts from the first trial's start to the last one's end.
2. Overhead: milliseconds per trial of autotune's own loop (the worker loop with its budget check and
   claim, the real objective: sampling, the trial context, stop rules, user attrs) around a training
   function that trains nothing, against plain Optuna ask/tell (the same suggest calls, then tell) with
   the same sampler on the same storage, 50 trials of each in turn. Per storage (in-memory, SQLite,
   journal, PostgreSQL when AUTOTUNE_TEST_POSTGRES is set) at the 100th and the 1000th trial, and the
   storage's part alone (minus in-memory), as a ratio and as a share of a 1-second trial. Per trial too, the
   counts a loaded machine does not change: SQL statements and transactions sent (each a round trip to a
   database server) and this process's CPU, of each arm.

    python bench/scaling.py                      # both parts
    python bench/scaling.py --part overhead --trials 1000 --sampler tpe
    python bench/scaling.py --part overhead --trials 1000 --storages postgresql   # in-memory and PostgreSQL only
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402

from autotune import config  # noqa: E402
from autotune.search import (
    samplers,  # noqa: E402
    space,  # noqa: E402
)
from autotune.spec import TrialRecord  # noqa: E402
from autotune.study import (
    budget,  # noqa: E402
    local_workers,  # noqa: E402
    workers,  # noqa: E402
)
from autotune.study import runner as study_mod  # noqa: E402
from autotune.study import storage as storage_mod  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = {
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "optimizer": {"type": "categorical", "choices": ["sgd", "adam", "adamw"]},
    "momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}},
    "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-2, "log": True},
    "batch_size": {"type": "categorical", "choices": [32, 64, 128]},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    "precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
    "init": {"type": "categorical", "choices": ["default", "xavier_uniform", "kaiming_normal"]},
}


def make_cfg(storage: str, name: str, n_trials: int, sampler: str = "tpe", epochs: int = 2) -> config.RunConfig:
    raw: dict[str, Any] = {
        "study": {"name": name, "storage": storage, "n_trials": n_trials, "seed": 0, "sampler": sampler},
        "data": {"name": "digits"},
        "model": {"name": "cnn", "channels": [8, 16], "hidden": 32},
        "train": {"device": "cpu", "epochs": epochs},
        "space": SPACE,
        "pruning": {"pruner": "none"},
    }
    return config.from_dict(raw, source=str(ROOT / "bench" / "scaling.yaml"))


# ---------------------------------------------------------------- 1. throughput


def throughput(n_trials: int, tmp: Path) -> None:
    cores = workers.cpu_cores()
    print(f"\n1. Throughput: {n_trials} real trials (CNN 8-16 on digits, 2 epochs, TPE), journal storage, "
          f"{cores} cores")
    rows = []
    # 1 worker on all cores (what --workers 1 does), 1 worker on 1 thread (the control: is the gain from
    # processes or from fewer threads fighting over busy cores?), then 2 workers on cores // 2 threads each.
    for i, (n, threads) in enumerate(((1, None), (1, 1), (2, None))):
        cfg = make_cfg(f"journal:///{tmp}/tp{i}.log", f"tp{i}", n_trials)
        slots = workers.slots_for(cfg, n, None)
        if threads is not None:
            slots = [dataclasses.replace(s, threads=threads) for s in slots]
        t0 = time.perf_counter()
        res = local_workers.run_parallel(cfg, slots, on_note=lambda s: print("  " + s))
        wall = time.perf_counter() - t0
        done = [t for t in res.get_trials() if t.state.is_finished() and not TrialRecord.of(t).surplus]
        span = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)).total_seconds()
        fin = budget.counts(res.get_trials()).finished
        train = statistics.mean(TrialRecord.of(t).metrics.get("train_time_s", 0.0) for t in done)
        rows.append((n, slots[0].threads, fin, wall, 60 * fin / wall, 60 * fin / span, train))
    base_wall, base_steady = rows[0][4], rows[0][5]
    print(f"  {'workers':>7} {'threads':>7} {'finished':>8} {'wall_s':>7} {'trials/min':>10} {'steady/min':>10} "
          f"{'train_s':>7} {'speed-up':>8} {'steady speed-up':>15}")
    for n, th, fin, wall, rate, steady, train in rows:
        print(f"  {n:>7} {th:>7} {fin:>8} {wall:>7.1f} {rate:>10.1f} {steady:>10.1f} {train:>7.2f} "
              f"{rate / base_wall:>8.2f} {steady / base_steady:>15.2f}")


# ---------------------------------------------------------------- 2. overhead


STARTS: list[float] = []  # when each trivial_fit began: trial-to-trial times with no callback (which costs a read)


def trivial_fit(ctx: Any) -> None:
    """No training at all: the context's epochs and one report each. What a trial then costs is autotune's own
    per-trial work (sampling, the context, the stop rules, the user attrs, the worker loop) and the storage's."""
    import torch

    STARTS.append(time.perf_counter())
    ctx.prepare(torch.nn.Linear(1, 1))
    lr = float(ctx.params["lr"])
    for epoch in ctx.epochs():
        ctx.report(val_accuracy=0.5 + 0.4 * epoch / ctx.settings.epochs - 0.1 * abs(lr - 0.01), val_loss=1.1 / epoch)


def overhead(n_trials: int, sampler: str, tmp: Path, chunk: int = 50, only: tuple[str, ...] = ()) -> None:
    print(f"\n2. Overhead per trial ({sampler} sampler, 2 objectives, {len(SPACE)} searched settings, 5 epochs), one "
          f"process: autotune (its worker loop and objective, a training function that trains nothing) against "
          f"plain Optuna ask/tell (the same suggest calls, then tell) with the same sampler on the same storage; "
          f"{chunk} trials of each in turn, {n_trials} each")
    # SQLite takes one process (several workers are refused), so its loop is `autotune run`'s; journal and
    # PostgreSQL are what several workers share, so theirs is the worker loop as well.
    storages: list[tuple[str, str, str]] = [("in-memory", "", "run"), ("sqlite", f"sqlite:///{tmp}/o.db", "run"),
                                            ("journal", f"journal:///{tmp}/o.log", "run"),
                                            ("journal", f"journal:///{tmp}/w.log", "worker")]
    pg = os.environ.get("AUTOTUNE_TEST_POSTGRES")
    pg_db = None
    if pg:
        pg_db, url = _pg_database(pg)
        storages += [("postgresql", url, "run"), ("postgresql", url, "worker")]
    else:
        print("  (PostgreSQL skipped: set AUTOTUNE_TEST_POSTGRES, e.g. from `bash .ci/start_postgres.sh`)")
    if only:  # --storages: in-memory stays, the baseline of the "storage only" lines
        storages = [s for s in storages if s[0] in (*only, "in-memory")]
    marks = sorted({m for m in (100, 1000) if m <= n_trials} | {n_trials})
    rows: dict[str, dict[str, list[float]]] = {}
    try:
        for label, url, loop in storages:
            key = f"{label}/{loop}"
            rows[key] = _overhead_pair(label, url, n_trials, sampler, chunk, loop)
            a, p = rows[key]["autotune"], rows[key]["plain"]
            sql, cpu = rows[key]["sql"], rows[key]["cpu"]
            counted = f"; SQL statements autotune {sql[0]:.1f}, plain {sql[1]:.1f}, transactions autotune " \
                      f"{sql[2]:.1f}, plain {sql[3]:.1f}" if url else ""
            print(f"  {key}: autotune {sum(a):.1f}s, plain {sum(p):.1f}s for {n_trials} trials each; per trial: "
                  f"CPU of this process autotune {1e3 * cpu[0]:.1f} ms, plain {1e3 * cpu[1]:.1f} ms{counted}",
                  flush=True)
    finally:
        if pg_db is not None:
            _drop(pg, pg_db)

    def at(per: list[float], m: int) -> float:  # median of the `chunk` trials before the m-th: robust to a spike
        return statistics.median(per[max(0, m - chunk):m])

    head = "".join(f" {'autotune @' + str(m):>13} {'plain @' + str(m):>10} {'ratio @' + str(m):>11}" for m in marks)
    print(f"  {'storage/loop':<19}{head}   (ms per trial)")
    for label, r in rows.items():
        cells = "".join(f" {1e3 * at(r['autotune'], m):>13.1f} {1e3 * at(r['plain'], m):>10.1f} "
                        f"{at(r['autotune'], m) / at(r['plain'], m):>10.2f}x" for m in marks)
        print(f"  {label:<19}{cells}")
    if "in-memory/run" in rows:
        mem = rows["in-memory/run"]
        print("  storage only (each storage's ms per trial minus in-memory's, same arm):")
        for label, r in rows.items():
            if label == "in-memory/run":
                continue
            cells = []
            for m in marks:
                a = at(r["autotune"], m) - at(mem["autotune"], m)
                p = at(r["plain"], m) - at(mem["plain"], m)
                cells.append(f"@{m}: autotune {1e3 * a:.1f} ms, plain {1e3 * p:.1f} ms, ratio {a / p:.2f}x, "
                             f"{a:.1%} of a 1-second trial")
            print(f"  {label:<19}" + "; ".join(cells))
    print(f"  (@N: median of the {chunk} trials before the Nth)")


def _overhead_pair(label: str, url: str, n_trials: int, sampler: str, chunk: int, loop: str) -> dict[str, list[float]]:
    """Per-trial seconds of autotune and of plain ask/tell on one storage, run `chunk` trials at a time in turn
    (a shared machine's load then falls on both alike). `loop`: "run" is `autotune run`'s loop (study.run: one
    process, Optuna's optimize); "worker" is what `--workers` and `autotune worker` run (budget check, claim)."""
    cfg = make_cfg(url or "journal:///unused", f"oh-{label}-{loop}", n_trials, sampler, epochs=5)
    if url:
        plain_storage: Any = storage_mod.make_storage(cfg)  # as autotune opens it: same engine, same pragmas
    else:
        plain_storage = optuna.storages.InMemoryStorage()
    plain = optuna.create_study(study_name=f"plain-{label}-{loop}", storage=plain_storage, directions=cfg.directions,
                                sampler=samplers.make_sampler(cfg))
    out: dict[str, list[float]] = {"autotune": [], "plain": []}
    # Per arm: statements and transactions sent to the database (each a round trip to a server), this process's CPU.
    # The noise-proof part of the comparison: a shared machine's load changes the times, not these counts.
    tally = {arm: {"sql": 0, "begin": 0, "cpu": 0.0} for arm in out}
    arm: list[str | None] = [None]  # whose statements these are (None: setting up, not counted)

    def on_sql(*_: Any) -> None:
        if arm[0] is not None:
            tally[arm[0]]["sql"] += 1

    def on_begin(*_: Any) -> None:
        if arm[0] is not None:
            tally[arm[0]]["begin"] += 1

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    event.listen(Engine, "before_cursor_execute", on_sql)
    event.listen(Engine, "begin", on_begin)

    def started(study: optuna.Study, todo: int) -> None:
        stamps[0] = time.perf_counter()
        arm[0] = "autotune"
        cpu[0] = time.process_time()

    cpu = [0.0]
    stamps = [0.0]
    study = None
    if not url or loop == "worker":
        study = study_mod.open_study(cfg, fresh=True) if url else optuna.create_study(
            study_name=cfg.study.name, storage=optuna.storages.InMemoryStorage(), sampler=samplers.make_sampler(cfg),
            directions=cfg.directions)
    from autotune.study.objective import Objective

    objective = Objective(cfg, trivial_fit)
    for done in range(chunk, n_trials + chunk, chunk):
        n = min(done, n_trials)
        raw = cfg.to_dict()
        part = config.from_dict({**raw, "study": {**raw["study"], "n_trials": n}}, source=cfg.source)
        STARTS.clear()
        # No callbacks: for a callback Optuna reads each trial back from the storage (plain ask/tell has none);
        # a trial's time is from its training function's start to the next one's (the chunk's first: from when
        # the study is open; its last: to the loop's return).
        if study is not None:  # the worker loop (and the in-memory baseline, which study.run cannot open)
            started(study, n)
            workers.run_worker(part, objective=objective, study=study)
            end = time.perf_counter()
        else:
            res = study_mod.run(part, fresh=done == chunk, fit=trivial_fit, on_start=started)
            end = time.perf_counter()
            engine = getattr(getattr(res._storage, "_backend", None), "engine", None)
            if engine is not None:  # each chunk's run opened its own: close its connections (a server's slots)
                engine.dispose()
        tally["autotune"]["cpu"] += time.process_time() - cpu[0]
        arm[0] = "plain"
        marks = [stamps[0], *STARTS[1:], end]
        out["autotune"] += [b - a for a, b in zip(marks, marks[1:])]
        c0 = time.process_time()
        for _ in range(n - len(out["plain"])):
            t0 = time.perf_counter()
            trial = plain.ask()
            values = space.sample(trial, cfg)  # the same suggest calls a hand-written objective would make
            plain.tell(trial, [0.5 + 0.1 * float(values["lr"]), 0.01])
            out["plain"].append(time.perf_counter() - t0)
        tally["plain"]["cpu"] += time.process_time() - c0
        arm[0] = None
    event.remove(Engine, "before_cursor_execute", on_sql)
    event.remove(Engine, "begin", on_begin)
    assert len(out["autotune"]) == n_trials, len(out["autotune"])
    a, p = tally["autotune"], tally["plain"]
    out["cpu"] = [a["cpu"] / n_trials, p["cpu"] / n_trials]
    out["sql"] = [a["sql"] / n_trials, p["sql"] / n_trials, a["begin"] / n_trials, p["begin"] / n_trials]
    return out


def _pg_database(base: str) -> tuple[str, str]:
    import psycopg

    plain = base.replace("postgresql+psycopg://", "postgresql://")
    db = f"autotune_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    return db, f"{plain.rpartition('/')[0]}/{db}"


def _drop(base: str, db: str) -> None:
    import psycopg

    with psycopg.connect(base.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["all", "throughput", "overhead"], default="all")
    ap.add_argument("--throughput-trials", type=int, default=16)
    ap.add_argument("--trials", type=int, default=1000, help="overhead study size (figures at 100 and at this)")
    ap.add_argument("--sampler", default="random", help="sampler for the overhead part (random isolates storage)")
    ap.add_argument("--storages", default="", help="overhead part: only these, comma-separated (sqlite, journal, "
                                                   "postgresql); in-memory always runs")
    args = ap.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"autotune scaling bench: optuna {optuna.__version__}, {workers.cpu_cores()} cores, load average {load:.1f}")
    with tempfile.TemporaryDirectory() as d:
        if args.part in ("all", "throughput"):
            throughput(args.throughput_trials, Path(d))
        if args.part in ("all", "overhead"):
            overhead(args.trials, args.sampler, Path(d), only=tuple(filter(None, args.storages.split(","))))


if __name__ == "__main__":
    main()
