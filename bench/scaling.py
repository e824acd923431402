"""How autotune scales out, measured here and now (not a test).

1. Throughput: finished trials per minute of a real small study (CNN on digits) with 1 and 2 worker
   processes (`autotune run --workers N`: spawned processes, threads = cores // N each) on a journal
   file; the ratio to the 1-worker run is the speed-up. Wall time includes process start-up; the
   steady rate counts from the first trial's start to the last one's end.
2. Overhead: seconds per trial that autotune + Optuna + the storage add, with a trivial objective that
   makes the same storage calls the real one does (sampling every searched setting, the settings /
   seed / device user attrs, history and epoch_values after every epoch, the final metrics) through
   the same worker loop (budget check, claim, worker stamp). Per storage (in-memory as the baseline,
   SQLite, journal, PostgreSQL when AUTOTUNE_TEST_POSTGRES is set) at the 100th and the 1000th
   trial, as a fraction of a 1-second trial.

    python bench/scaling.py                      # both parts
    python bench/scaling.py --part overhead --trials 1000 --sampler tpe
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

from autotune import config, space, workers  # noqa: E402
from autotune import study as study_mod  # noqa: E402

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
        slots = workers.plan(cfg, n, None)
        if threads is not None:
            slots = [dataclasses.replace(s, threads=threads) for s in slots]
        t0 = time.perf_counter()
        res = workers.run_parallel(cfg, slots, on_note=lambda s: print("  " + s))
        wall = time.perf_counter() - t0
        done = [t for t in res.study.get_trials() if t.state.is_finished() and not t.user_attrs.get("surplus")]
        span = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)).total_seconds()
        fin = workers.counts(res.study.get_trials()).finished
        train = statistics.mean(t.user_attrs.get("train_time_s", 0.0) for t in done)
        rows.append((n, slots[0].threads, fin, wall, 60 * fin / wall, 60 * fin / span, train))
    base_wall, base_steady = rows[0][4], rows[0][5]
    print(f"  {'workers':>7} {'threads':>7} {'finished':>8} {'wall_s':>7} {'trials/min':>10} {'steady/min':>10} "
          f"{'train_s':>7} {'speed-up':>8} {'steady speed-up':>15}")
    for n, th, fin, wall, rate, steady, train in rows:
        print(f"  {n:>7} {th:>7} {fin:>8} {wall:>7.1f} {rate:>10.1f} {steady:>10.1f} {train:>7.2f} "
              f"{rate / base_wall:>8.2f} {steady / base_steady:>15.2f}")


# ---------------------------------------------------------------- 2. overhead


class Trivial:
    """The real objective's storage traffic, without the training."""

    def __init__(self, cfg: config.RunConfig, epochs: int = 5) -> None:
        self.cfg = cfg
        self.epochs = epochs

    def __call__(self, trial: optuna.Trial) -> list[float]:
        settings = space.sample(trial, self.cfg)
        trial.set_user_attr("seed", trial.number)
        trial.set_user_attr("settings", settings)
        trial.set_user_attr("device", "cpu")
        trial.set_user_attr("precision", settings["precision"])
        history: list[dict[str, Any]] = []
        values: list[list[float]] = []
        for e in range(1, self.epochs + 1):
            acc = 0.5 + 0.4 * e / self.epochs - 0.1 * abs(settings["lr"] - 0.01)
            history.append({"epoch": e, "train_loss": 1 / e, "val_loss": 1.1 / e, "val_accuracy": acc,
                            "epoch_time_s": 0.2, "train_time_s": 0.2 * e, "samples_per_s": 7000.0,
                            "data_wait_fraction": 0.01, "lr": settings["lr"]})
            values.append([acc, 0.2 * e])
            trial.set_user_attr("history", history)
            trial.set_user_attr("epoch_values", values)
        for key, value in {"val_accuracy": acc, "val_loss": 0.3, "train_time_s": 0.2 * self.epochs,
                           "samples_per_s": 7000.0, "compile_time_s": 0.0, "data_wait_fraction": 0.01}.items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("epochs_run", self.epochs)
        return [acc, 0.2 * self.epochs]


def overhead(n_trials: int, sampler: str, tmp: Path) -> None:
    print(f"\n2. Overhead per trial of autotune + Optuna ({sampler} sampler, 2 objectives, {len(SPACE)} searched "
          f"settings) + storage, trivial objective with the real storage calls, one worker")
    storages: list[tuple[str, str]] = [("in-memory", ""), ("sqlite", f"sqlite:///{tmp}/o.db"),
                                       ("journal", f"journal:///{tmp}/o.log")]
    pg = os.environ.get("AUTOTUNE_TEST_POSTGRES")
    pg_db = None
    if pg:
        pg_db, url = _pg_database(pg)
        storages.append(("postgresql", url))
    else:
        print("  (PostgreSQL skipped: set AUTOTUNE_TEST_POSTGRES, e.g. from `bash .ci/start_postgres.sh`)")
    marks = sorted({m for m in (100, 1000) if m <= n_trials} | {n_trials})
    results: dict[str, dict[int, float]] = {}
    try:
        for label, url in storages:
            per = _overhead_one(label, url, n_trials, sampler)
            results[label] = {m: statistics.mean(per[max(0, m - 50):m]) for m in marks}
            print(f"  {label}: {n_trials} trials in {sum(per):.1f}s", flush=True)
    finally:
        if pg_db is not None:
            _drop(pg, pg_db)
    base = results["in-memory"]
    head = "".join(f" {'s/trial @' + str(m):>14} {'of 1s @' + str(m):>11} {'x mem @' + str(m):>11}" for m in marks)
    print(f"  {'storage':<11}{head}")
    for label, by in results.items():
        cells = "".join(f" {by[m]:>14.4f} {by[m] / 1.0:>10.1%} {by[m] / base[m]:>11.2f}" for m in marks)
        print(f"  {label:<11}{cells}")
    print("  (s/trial @N: mean over the 50 trials before the Nth; 'of 1s': that as a share of a 1-second trial; "
          "'x mem': ratio to the in-memory baseline)")


def _overhead_one(label: str, url: str, n_trials: int, sampler: str) -> list[float]:
    name = f"oh-{label}"
    cfg = make_cfg(url or "journal:///unused", name, n_trials, sampler)
    if url:
        study = study_mod.open_study(cfg, fresh=True)
    else:
        study = optuna.create_study(study_name=name, storage=optuna.storages.InMemoryStorage(),
                                    sampler=study_mod.make_sampler(cfg), directions=cfg.directions)
    stamps: list[float] = [time.perf_counter()]
    res = workers.run_worker(cfg, objective=Trivial(cfg), study=study,
                             callbacks=[lambda s, t: stamps.append(time.perf_counter())])
    assert workers.counts(res.study.get_trials()).finished == n_trials
    return [b - a for a, b in zip(stamps, stamps[1:])]


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
    args = ap.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"autotune scaling bench: optuna {optuna.__version__}, {workers.cpu_cores()} cores, load average {load:.1f}")
    with tempfile.TemporaryDirectory() as d:
        if args.part in ("all", "throughput"):
            throughput(args.throughput_trials, Path(d))
        if args.part in ("all", "overhead"):
            overhead(args.trials, args.sampler, Path(d))


if __name__ == "__main__":
    main()
