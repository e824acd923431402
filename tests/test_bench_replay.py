"""The replay benchmark (bench/replay*.py): the recording answers a replayed trial exactly, the simulated clock
charges what was recorded and orders workers by time, and every arm runs on the replay."""

from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace

import optuna
import pytest

from bench import replay
from bench.replay_arms import ParetoRankPruner
from bench.replay_backend import BudgetSpent, SimClock, replay_train, run_workers
from bench.replay_workload import RECORDINGS, Workload

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def mnist1d() -> Workload:
    return Workload.load(RECORDINGS / "mnist1d.jsonl.gz")


def test_the_surrogate_is_exact_on_recorded_points(mnist1d: Workload) -> None:
    for curve in mnist1d.curves[::37]:
        assert mnist1d.nearest(dict(curve.params)) is curve


def test_an_unrecorded_point_gets_its_nearest_recorded_curve(mnist1d: Workload) -> None:
    base = mnist1d.curves[5]
    moved = {**base.params, "lr": base.params["lr"] * 1.001}
    assert mnist1d.nearest(moved) is base
    # a parameter inactive in the point (momentum without sgd) does not move it
    if base.params["optimizer"] != "sgd":
        assert mnist1d.nearest({**base.params, "momentum": 0.123}) is base


def test_a_replayed_trial_reports_the_recorded_times(mnist1d: Workload) -> None:
    curve = next(c for c in mnist1d.curves if len(c.epochs) == mnist1d.max_epochs)
    clock = SimClock(1, budget_s=1e9, charge_cpu=False)
    clock.enter(0)
    records = []
    settings = {**curve.params, "epochs": 7, "lr": curve.params["lr"], "batch_size": curve.params["batch_size"]}
    result = replay_train(mnist1d, clock)(SimpleNamespace(settings=settings, probe=None), on_record=records.append)
    assert [r.train_time_s for r in records] == [e["train_time_s"] for e in curve.epochs[:7]]
    assert [r.val_accuracy for r in records] == [e["val_accuracy"] for e in curve.epochs[:7]]
    assert result.train_time_s == curve.epochs[6]["train_time_s"]
    assert result.epochs_run == 7
    # the clock: set-up, then each epoch's training and evaluation, as recorded
    assert clock.now() == pytest.approx(curve.epochs[6]["end_s"], abs=1e-9)


def test_the_clock_runs_the_worker_furthest_behind_and_stops_at_the_budget() -> None:
    clock = SimClock(3, budget_s=10.0)
    order: list[tuple[float, int]] = []
    lock = threading.Lock()
    steps = {0: 1.0, 1: 2.5, 2: 4.0}

    def work() -> None:
        clock.advance(steps[clock.worker])
        with lock:
            order.append((clock.now(), clock.worker))

    run_workers(clock, work)
    times = [t for t, _ in order]
    assert times == sorted(times)  # events happen in simulated-time order, whatever the threads do
    assert all(t <= 10.0 for t in times)
    assert {w for _, w in order} == {0, 1, 2}
    with pytest.raises(BudgetSpent):
        one = SimClock(1, 1.0)
        one.enter(0)
        one.advance(2.0)


def test_the_clock_charges_the_strategys_own_cpu_time_but_not_the_surrogates() -> None:
    def busy(seconds: float) -> None:
        t0 = time.thread_time()
        while time.thread_time() - t0 < seconds:
            pass

    clock = SimClock(1, budget_s=1e9)
    clock.enter(0)
    busy(0.05)  # the sampler thinking before a trial
    with clock.free():
        busy(0.05)  # the surrogate's lookup
    clock.advance(1.0)
    assert 1.05 <= clock.now() < 1.09
    assert clock.strategy_s[0] == pytest.approx(clock.now() - 1.0)
    off = SimClock(1, budget_s=1e9, charge_cpu=False)
    off.enter(0)
    busy(0.05)
    off.advance(1.0)
    assert off.now() == 1.0


def test_the_pareto_rank_pruner_prunes_below_the_median_rank() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    for acc in (0.9, 0.8, 0.7, 0.6, 0.5):  # completed trials at step 1: one per Pareto rank (same time)
        t = study.ask()
        t.set_user_attr("mm_values", [[acc, 1.0]])
        study.tell(t, [acc, 1.0])
    good, bad = study.ask(), study.ask()
    good.set_user_attr("mm_values", [[0.95, 1.0]])
    bad.set_user_attr("mm_values", [[0.55, 1.0]])
    pruner = ParetoRankPruner(["maximize", "minimize"])
    assert not pruner.should_prune(study, good.number, 1)
    assert pruner.should_prune(study, bad.number, 1)


@pytest.mark.parametrize("arm", list(replay.ARMS))
def test_every_arm_runs_on_the_replay(arm: str, mnist1d: Workload) -> None:
    run, cfg = replay.runner(arm, replay.SPACES["mnist1d"])
    for workers in (1, 3):
        ev = run(cfg, mnist1d, 0, 8.0, workers)
        done = [e for e in ev if e[3] == "COMPLETE"]
        assert done, f"{arm}: no trial completed in 8 simulated seconds on {workers} workers"
        assert all(0 <= e[0] <= 8.0 for e in ev)
        assert all(0 < e[1] <= 1 and e[2] > 0 for e in done)


def test_the_table_summarizes_times_to_target_with_intervals() -> None:
    # (simulated s, accuracy, training time, state): the second trial makes most of the front's hypervolume
    fast = [(1.0, 0.5, 1.0, "COMPLETE"), (2.0, 0.95, 1.5, "COMPLETE")]
    slow = [(4.0, 0.5, 1.0, "COMPLETE"), (8.0, 0.95, 1.5, "COMPLETE")]
    runs = {"plain Optuna": [slow, slow], "autotune pareto": [fast, fast]}
    ref, t_ref = replay.reference(runs)
    rows = replay.summarize(runs, ref, t_ref)
    assert rows["autotune pareto"]["to_0.95"][0] == 2.0
    assert rows["plain Optuna"]["to_0.95"][0] == 8.0
    ratio, lo, hi = rows["autotune pareto"]["x_plain Optuna_0.95"]
    assert ratio == 4.0 and lo == 4.0 and hi == 4.0
    assert math.isnan(rows["plain Optuna"].get("x_plain Optuna_0.95", (math.nan,))[0])
