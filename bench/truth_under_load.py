"""What autotune reports under load stays true (issue 29, items 1-3): before/after figures (not a test).

Three scenarios, each against a reading taken in the same run (the machine may be shared: the load average at
start and end is printed):

1. A reference taken under load. One trial of the mnist port (examples/final_only: one acceleration
   combination, cpu_threads 1) runs while `--spinners` busy processes hold the cores (its speed probe is taken
   then); the spinners stop and `--quiet-trials` more trials run with `max_trial_seconds` at `--limit-factor` x a
   quiet trial's own training time (measured first, in a study of its own). Printed: how many quiet trials were
   stopped as slow, the study's stored reference samples/s (and whether it says contended) against the quiet
   trials' own samples/s, as a ratio.
2. `autotune speed search_spaces/cnn.yaml --threads 2` with the spinners on: the rows' ± spread (median, max) and
   how many rows the table flags (contended / noisy) and whether it warns.
3. A capped trial's export retrained. With the spinners on, a digits CNN study at torch's default threads: a
   trial runs oversubscribed, the next ones are capped; the capped trial is exported (`autotune best --export`
   when it is the best, else the same export of that trial) and retrained under the same load. Printed: the
   export's `train.cpu_threads`, the trial's training time, the retrain's, and their ratio (1.0: reproduced).

It keeps to the public API and the CLI, so it runs on older checkouts too (the "before" figures):

    python bench/truth_under_load.py [--spinners N] [--quiet-trials 4] [--epochs 3] [--budget 90]
    python bench/truth_under_load.py --only 1          # one scenario
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402
import yaml  # noqa: E402

import autotune  # noqa: E402
from autotune import config  # noqa: E402
from autotune.spec import StudyRecord, TrialRecord  # noqa: E402

SPIN = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"
optuna.logging.set_verbosity(optuna.logging.WARNING)


def load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


@contextlib.contextmanager
def spinners(n: int, seconds: float = 900) -> Iterator[None]:
    """`n` Python processes spinning on the cores, bounded in time, always killed."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN.format(s=seconds)]) for _ in range(n)]
    try:
        time.sleep(0.5)
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def probe_records(study: optuna.Study) -> list[dict[str, Any]]:
    return list(StudyRecord.of(study).probes.values())


# ---------------------------------------------------------------- 1. a reference taken under load


def mnist_port(tmp: str, name: str, epochs: int, n_trials: int, limit: float | None = None) -> config.RunConfig:
    raw = yaml.safe_load((ROOT / "examples" / "final_only.yaml").read_text())
    raw["study"] = {"name": name, "storage": f"sqlite:///{tmp}/{name}.db", "n_trials": n_trials, "seed": 0}
    raw["train"] = {**raw["train"], "epochs": epochs, "device": "cpu", "cpu_threads": 1, "batch_size": 64,
                    "precision": "fp32", "user.width": 16, "user.gamma": 0.7}
    raw["space"] = {"lr": raw["space"]["lr"]}  # one combination (a searched user.* key would be part of it)
    if limit is not None:
        raw.setdefault("pruning", {})["slow"] = {"max_trial_seconds": round(limit, 3)}
    return config.from_dict(raw, source=str(ROOT / "examples" / "final_only.yaml"))  # its trainer lives there


def scenario_reference(tmp: str, n_spin: int, quiet_trials: int, epochs: int, factor: float) -> None:
    calib = autotune.run(mnist_port(tmp, "calib", epochs, 1)).study.trials[0]
    quiet_s = float(TrialRecord.of(calib).metrics["train_time_s"])
    limit = factor * quiet_s
    with spinners(n_spin):
        autotune.run(mnist_port(tmp, "ref", epochs, 1, limit=None))
    study = autotune.run(mnist_port(tmp, "ref", epochs, 1 + quiet_trials, limit=limit)).study
    quiet = study.trials[1:]
    slow = [TrialRecord.of(t) for t in quiet if TrialRecord.of(t).stop_reason == "slow"]
    trained = [v for t in quiet if (v := TrialRecord.of(t).metric("samples_per_s")) is not None]
    rec = probe_records(study)
    ref = float(rec[0]["samples_per_s"]) if rec and rec[0].get("samples_per_s") else float("nan")
    quiet_sps = (statistics.median(trained) if trained
                 else float(TrialRecord.of(calib).metrics.get("samples_per_s", float("nan"))))
    print(f"1. reference under load: probe trial under {n_spin} spinners, then {quiet_trials} quiet trials with "
          f"max_trial_seconds {limit:.2f} ({factor:g} x a quiet trial's {quiet_s:.2f} s)")
    print(f"   quiet trials stopped as slow: {len(slow)} of {len(quiet)}"
          + (f"  (first: {(slow[0].stop_detail or '')[:110]})" if slow else ""))
    print(f"   stored reference {ref:,.0f} samples/s (contended: {rec[0].get('contended', 'not said') if rec else '-'},"
          f" from {rec[0].get('source') if rec else '-'}); quiet trials {quiet_sps:,.0f} samples/s; "
          f"reference / quiet = {ref / quiet_sps:.2f}x")


# ---------------------------------------------------------------- 2. `autotune speed` on busy cores


def scenario_speed(n_spin: int, budget: float) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with spinners(n_spin):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "autotune", "speed", "search_spaces/cnn.yaml", "--threads", "2",
                              "--no-compile", "--budget", str(budget)], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=budget + 300)
        took = time.perf_counter() - t0
    rows = [ln.split() for ln in out.stdout.splitlines()[2:] if ln.strip() and ln.split()[0].isdigit()]
    measured = [r for r in rows if r[2].isdigit()]
    spreads = [int(r[2]) for r in measured]
    flagged = [r for r in measured if r[3] in ("contended", "noisy")]
    warned = [ln for ln in out.stderr.splitlines() if ln.startswith("warning: ")]
    print(f"2. autotune speed cnn.yaml --threads 2 under {n_spin} spinners ({took:.0f} s, exit {out.returncode}): "
          f"{len(measured)} rows measured")
    if spreads:
        print(f"   ± spread: median {statistics.median(spreads)}%, max {max(spreads)}%; rows flagged "
              f"{len(flagged)} of {len(measured)} (contended {sum(r[3] == 'contended' for r in flagged)}, noisy "
              f"{sum(r[3] == 'noisy' for r in flagged)}); warning line: {'yes' if warned else 'no'}")
    if warned:
        print(f"   {warned[0][:160]}")


# ---------------------------------------------------------------- 3. a capped trial's export, retrained


def cnn_study(tmp: str, n_trials: int, epochs: int) -> config.RunConfig:
    return config.from_dict({"study": {"name": "cap", "storage": f"sqlite:///{tmp}/cap.db", "n_trials": n_trials,
                                       "seed": 0, "sampler": "random"},
                             "data": {"name": "digits"}, "model": {"name": "cnn", "channels": [16, 32], "hidden": 64},
                             "objectives": [{"metric": "val_accuracy"}], "pruning": {"pruner": "none"},
                             "train": {"device": "cpu", "epochs": epochs, "batch_size": 64},
                             "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}}},
                            source=str(Path(tmp) / "cap.yaml"))


def export_of(cfg: config.RunConfig, trial: optuna.trial.FrozenTrial, best: Any, path: Path) -> str:
    """The trial's export: `autotune best --export` when it is the best, else the same function on that trial."""
    if best is not None and best.number == trial.number:
        (Path(cfg.source)).write_text(yaml.safe_dump(cfg.to_dict()))
        subprocess.run([sys.executable, "-m", "autotune", "best", cfg.source, "--export", str(path)], check=True,
                       capture_output=True, cwd=Path(cfg.source).parent,
                       env=dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")))
        return "autotune best --export"
    from autotune.observe.export import export_best
    from autotune.search.results import summarize

    export_best(cfg, summarize(trial, [o.metric for o in cfg.objectives]), path)
    return "export_best (the capped trial is not the best)"


def scenario_capped(tmp: str, n_spin: int, epochs: int) -> None:
    cfg = cnn_study(tmp, 4, epochs)
    with spinners(n_spin):
        res = autotune.run(cfg)
        capped = [t for t in res.study.trials
                  if TrialRecord.of(t).cpu_threads_capped is not None and t.state.name == "COMPLETE"]
        if not capped:
            print("3. capped trial's export: no trial ran oversubscribed under the spinners (nothing capped); "
                  "try more --spinners")
            return
        trial = capped[-1]
        path = Path(tmp) / "best.yaml"
        how = export_of(cfg, trial, res.best, path)
        again = config.load(path)
        retrain = autotune.train(again)
    record = TrialRecord.of(trial)
    ratio = retrain.train_time_s / float(record.metrics["train_time_s"])
    print(f"3. capped trial {trial.number} (cpu_threads_capped {record.cpu_threads_capped}, device "
          f"{record.device}) exported by {how}: train.cpu_threads "
          f"{again.train.get('cpu_threads', 'absent')}")
    print(f"   trial {float(record.metrics['train_time_s']):.2f} s, export retrained {retrain.train_time_s:.2f} s "
          f"under the same load: retrain / trial = {ratio:.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spinners", type=int, default=None, help="busy processes (default: 2 per core)")
    p.add_argument("--quiet-trials", type=int, default=4)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--limit-factor", type=float, default=2.0, help="max_trial_seconds as a multiple of a quiet "
                                                                    "trial's training time (scenario 1)")
    p.add_argument("--budget", type=float, default=90.0, help="`autotune speed --budget` (scenario 2)")
    p.add_argument("--only", type=int, choices=(1, 2, 3), help="run one scenario")
    args = p.parse_args()
    n_spin = args.spinners or 2 * (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                   else os.cpu_count() or 1)
    print(f"autotune {getattr(autotune, '__version__', '?')}; load average at start: {load()}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, 1):
            scenario_reference(tmp, n_spin, args.quiet_trials, args.epochs, args.limit_factor)
        if args.only in (None, 2):
            scenario_speed(n_spin, args.budget)
        if args.only in (None, 3):
            scenario_capped(tmp, n_spin, args.epochs)
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
