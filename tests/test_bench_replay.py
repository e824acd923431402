"""The replay benchmark (bench/replay*.py): the recording answers a replayed trial exactly, the simulated clock
charges what was recorded and orders workers by time, and every arm runs on the replay."""

from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace

import pytest

from bench import replay
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


@pytest.mark.parametrize("arm", [a if a in replay.DEFAULT_ARMS else pytest.param(a, marks=pytest.mark.slow)
                                 for a in replay.ARMS])  # the development variants: slow
def test_every_arm_runs_on_the_replay(arm: str, mnist1d: Workload) -> None:
    run, cfg = replay.runner(arm, replay.SPACES["mnist1d"])
    for workers in (1, 3):
        ev = run(cfg, mnist1d, 0, 8.0, workers)
        done = [e for e in ev if e[3] == "COMPLETE"]
        assert done, f"{arm}: no trial completed in 8 simulated seconds on {workers} workers"
        assert all(0 <= e[0] <= 8.0 for e in ev)
        assert all(0 < e[1] <= 1 and e[2] > 0 for e in done)


def test_the_measures_read_a_fixed_reference_and_censor_at_the_budget() -> None:
    front = [(1.0, 0.5), (2.0, 0.9)]
    t_ref = 2.2
    # (simulated s, accuracy, training time, state): the second trial reaches the reference front's hypervolume
    ev = [(3.0, 0.5, 1.0, "COMPLETE"), (5.0, None, None, "PRUNED"), (7.0, 0.9, 2.0, "COMPLETE")]
    m = replay.measures(ev, front, t_ref, budget=10.0)
    assert m.to[("lin", 0.9)] == 7.0 and m.to[("log", 0.95)] == 7.0
    assert m.hv_end["lin"] == pytest.approx(1.0) and m.best_acc == 0.9
    assert m.trials == 3 and m.stopped == 1
    assert m.anytime[-1] == pytest.approx(1.0) and m.anytime[0] == 0.0  # nothing done at a 40th of the budget
    never = replay.measures(ev[:2], front, t_ref, budget=10.0)
    assert math.isinf(never.to[("lin", 0.9)])
    assert replay.rmst([never.to[("lin", 0.9)], 4.0], 10.0) == 7.0  # a seed that never got there counts the budget
    # the second view: the same front on log time (each decade of time weighs the same)
    fast_only = replay.measures(ev[:1], front, t_ref, budget=10.0)
    assert fast_only.hv_end["lin"] == pytest.approx(0.5 * 1.2 / (0.5 * 1.0 + 0.9 * 0.2))
    assert fast_only.hv_end["log"] == pytest.approx(0.5 * math.log(2.2) / (0.5 * math.log(2) + 0.9 * math.log(1.1)))


def test_a_paired_ratio_and_its_interval_on_a_hand_made_case() -> None:
    # every seed of the arm takes half its baseline's time: the paired ratio is 2 in every bootstrap replicate
    base, mine = [1.0, 10.0, 1.0, 10.0, 3.0], [0.5, 5.0, 0.5, 5.0, 1.5]
    assert replay.paired_ratio(base, mine, budget=100.0) == pytest.approx((2.0, 2.0, 2.0))
    # (an unpaired bootstrap of the same seeds would spread: the pairing is what makes it tight)
    # censoring: a baseline seed that never got there counts the budget (10), not infinity
    ratio, lo, hi = replay.paired_ratio([math.inf, 4.0], [2.0, 2.0], budget=10.0)
    assert ratio == pytest.approx(7.0 / 2.0) and lo == pytest.approx(2.0) and hi == pytest.approx(5.0)
    # over tasks: the median of the per-task ratios
    x = replay.median_ratio([(base, mine, 100.0), ([4.0] * 3, [4.0] * 3, 10.0), ([9.0] * 3, [1.0] * 3, 10.0)])
    assert x == pytest.approx((2.0, 2.0, 2.0))
    d, lo, hi = replay.paired_diff([0.9, 0.8], [0.95, 0.85])
    assert (d, lo, hi) == pytest.approx((0.05, 0.05, 0.05))


@pytest.mark.parametrize("arm", replay.DEFAULT_ARMS)
def test_every_peer_and_autotune_run_on_lcbench(arm: str) -> None:
    pytest.importorskip("onnxruntime")
    run, cfg = replay.runner(arm, replay.SPACES["lcbench"])
    budget = replay.budget_of("lcbench", "3945", 1, trials=4)
    for workers in (1, 2):
        ev = run(cfg, replay.workload("lcbench", "3945"), 0, budget, workers)
        assert ev and all(0 <= e[0] <= budget for e in ev)
        counted = [e for e in ev if e[1] is not None]
        # epochs are fixed on LCBench: a stopped trial never counts (the counting rule), a completed one always
        assert all(e[3] == "COMPLETE" for e in counted) and all(e[1] is not None for e in ev if e[3] == "COMPLETE")
        assert all(0 < e[1] <= 1 and e[2] > 0 for e in counted)


def test_two_versions_compare_on_the_workload_their_runs_replayed(tmp_path, capsys, monkeypatch) -> None:
    # replay_compare reads the workload from the saved runs (it read every file as LCBench's, and failed on MNIST-1D)
    import json

    from bench import replay_compare

    run, cfg = replay.runner("random search", replay.SPACES["mnist1d"])
    wl = replay.recording("mnist1d")
    budget = replay.budget_of("mnist1d", None, 1)
    evs = {arm: [[list(e) for e in run(cfg, wl, s, budget, 1)] for s in (0, 1)] for arm in ("a", "b")}
    saved = tmp_path / "runs.json"
    saved.write_text(json.dumps({"workload": "mnist1d", "seeds": [0, 1],
                                 "runs": {"|1|autotune": evs["a"], "|1|plain Optuna": evs["b"]}}))
    monkeypatch.setattr("sys.argv", ["replay_compare", "--old", str(saved), "--new", str(saved)])
    replay_compare.main()
    same = capsys.readouterr().out.split("new vs old")[1]  # one version against itself
    assert "time to match, strict: 1.00x [1.00, 1.00]" in same and "anytime hypervolume: 1.00x [1.00, 1.00]" in same
    other = tmp_path / "lc.json"
    other.write_text(json.dumps({"workload": "lcbench", "seeds": [], "runs": {}}))
    with pytest.raises(SystemExit, match="different workloads"):
        replay_compare.workload_of([saved, other])
