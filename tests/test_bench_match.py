"""Time to match and the anytime hypervolume (bench/replay_match.py) on hand-made runs, with exact expected ratios,
and the two-level bootstrap's intervals and goals on hand-made figures."""

from __future__ import annotations

import pytest

from bench import replay
from bench import replay_match as rm

pytestmark = pytest.mark.filterwarnings("ignore")

FRONT = [(1.0, 1.0)]  # the reference: one point at 1 s, accuracy 1; time reference 2 s -> its hypervolume is 1
T_REF, BUDGET = 2.0, 100.0
# (simulated seconds, accuracy, training time, state): a point at 1 s of accuracy a has hypervolume share a
ARM = [(10.0, 0.5, 1.0, "COMPLETE"), (20.0, None, None, "PRUNED"), (30.0, 0.8, 1.0, "COMPLETE")]
BASE = [(20.0, 0.6, 1.0, "COMPLETE"), (50.0, 0.55, 1.5, "COMPLETE")]  # the second adds nothing


def seed(ev: list) -> replay.Seed:
    return replay.measures(ev, FRONT, T_REF, BUDGET)


def test_the_steps_are_the_rises_of_the_anytime_hypervolume() -> None:
    assert [t for t, _ in seed(ARM).steps] == [10.0, 30.0]
    assert [s for _, s in seed(ARM).steps] == pytest.approx([0.5, 0.8])
    assert [t for t, _ in seed(BASE).steps] == [20.0] and seed(BASE).steps[0][1] == pytest.approx(0.6)


def test_time_to_match_on_a_hand_made_pair_of_runs() -> None:
    arm, base = seed(ARM), seed(BASE)
    # the arm reaches the baseline's end (0.6) at 30 s: the baseline needed the whole budget for it
    assert rm.match_ratio(arm.steps, base.steps, BUDGET) == pytest.approx(100 / 30)
    # the baseline never reaches the arm's end (0.8): the reverse ratio, the arm reached the baseline's end at 30 s
    assert rm.match_ratio(base.steps, arm.steps, BUDGET) == pytest.approx(30 / 100)
    # a run matches itself only at the end of its last rise
    assert rm.match_ratio(arm.steps, arm.steps, BUDGET) == pytest.approx(100 / 30)
    # a baseline with nothing (no counted point): the arm's first point matches it
    assert rm.match_ratio(arm.steps, (), BUDGET) == pytest.approx(100 / 10)
    assert rm.match_ratio((), arm.steps, BUDGET) == pytest.approx(10 / 100)
    assert rm.match_ratio((), (), BUDGET) == 1.0
    # strict: the baseline's own time to its end (20 s) instead of the budget; the reverse, the arm's (30 s)
    assert rm.match_ratio(arm.steps, base.steps, BUDGET, strict=True) == pytest.approx(20 / 30)
    assert rm.match_ratio(base.steps, arm.steps, BUDGET, strict=True) == pytest.approx(30 / 20)  # the reciprocal
    assert rm.match_ratio(arm.steps, arm.steps, BUDGET, strict=True) == 1.0  # an identical run: exactly 1
    assert rm.match_ratio(arm.steps, (), BUDGET, strict=True) == pytest.approx(100 / 10)  # nothing: the budget


def test_the_anytime_hypervolume_is_the_area_under_the_curve_over_the_budget() -> None:
    assert rm.auc(seed(ARM).steps, BUDGET) == pytest.approx((0.5 * 20 + 0.8 * 70) / 100)
    assert rm.auc(seed(BASE).steps, BUDGET) == pytest.approx(0.6 * 80 / 100)
    assert rm.auc([(40.0, 1.0)], 20.0) == 0.0  # a rise after the budget counts nothing
    assert rm.auc([], BUDGET) == 0.0


def test_the_bootstrap_resamples_tasks_and_seeds_and_the_point_is_a_geometric_mean() -> None:
    same = [[2.0, 2.0], [2.0, 2.0, 2.0]]  # no spread anywhere: the interval is the point
    assert rm.ratio_boot(same) == pytest.approx((2.0, 2.0, 2.0))
    spread = [[1.0, 4.0], [2.0]]  # task means on the log scale: log 2, log 2; the seeds within task 1 spread it
    point, lo, hi = rm.ratio_boot(spread)
    assert point == pytest.approx(2.0) and 1.0 <= lo < 2.0 < hi <= 4.0
    tasks = [[8.0], [1.0]]  # tasks differ: the interval spans the tasks' own values
    point, lo, hi = rm.ratio_boot(tasks)
    assert point == pytest.approx(8 ** 0.5) and lo == pytest.approx(1.0) and hi == pytest.approx(8.0)
    # the accuracy goal's share of tasks: 3 of 4 tasks at most 0.002 below
    share = rm.share_boot([[0.0], [-0.001], [-0.0021], [0.01]], -0.002)
    assert share[0] == pytest.approx(0.75) and share[1] < 0.75 < share[2]


def test_a_goal_is_met_only_where_the_intervals_lower_end_clears_it() -> None:
    fast = [seed(ARM)] * 3
    slow = [seed(BASE)] * 3
    ms = {("t1", 1, "autotune"): fast, ("t1", 1, "plain Optuna"): slow,
          ("t2", 1, "autotune"): fast, ("t2", 1, "plain Optuna"): slow}
    budgets = {("t1", 1): BUDGET, ("t2", 1): BUDGET}
    lines = rm.goals(ms, ["t1", "t2"], 1, "autotune", budgets, "1 worker")
    assert lines[0] == ("| 1 worker | time to match plain Optuna >= 2x | 3.33x [3.33, 3.33] "
                        "(strict 0.67x [0.67, 0.67]) | met |")
    assert lines[1].endswith("| 100% of 2 [100%, 100%] | met |")
    ms[("t2", 1, "autotune")] = [seed(ARM[:1])] * 3  # on t2 the arm stops at 0.5: never matches, lower accuracy
    lines = rm.goals(ms, ["t1", "t2"], 1, "autotune", budgets, "1 worker")
    assert lines[0].endswith("| not met |") and "[0.20, 3.33]" in lines[0]  # 20 s / 100 s on t2
    assert lines[1].endswith("| 50% of 2 [0%, 100%] | not met |")


def test_strategy_dev_goals_read_saved_dev_runs_and_refuse_report_tasks(tmp_path, capsys) -> None:
    import json

    from bench import strategy_dev

    peers = ["plain Optuna", "OptunaHub multi_metric_pruner", "MOASHA rank-corrected"]

    def saved(task: str) -> dict:
        b = replay.budget_of("lcbench", task, 1)
        slow = [[0.5 * b, 0.5, 1.0, "COMPLETE"]]  # the peers reach their end at half the budget
        fast = [[0.1 * b, 0.5, 1.0, "COMPLETE"]]  # the variant, at a tenth of the budget: 5x sooner than them
        return {f"{task}|1|{a}": [fast if a == "autotune v" else slow] * 2 for a in [*peers, "autotune v"]}

    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps({"workload": "lcbench", "seeds": [0, 1], "runs": {
        **saved(replay.DEV_TASKS[0]), **saved(replay.DEV_TASKS[1])}}))
    strategy_dev.main(["--goals", str(dev), "--arms", "autotune v"])
    out = capsys.readouterr().out
    # budget / its time: 10x; strict, the peer's own time to its end / its time: 5x
    assert "| autotune v | 1w, 2 tasks | time to match plain Optuna >= 2x | 10.00x [10.00, 10.00] (strict 5.00x" in out
    assert "best accuracy >= plain's - 0.002 on >= 90% of tasks | 100% of 2" in out
    report = next(t for t in replay.task_list("lcbench", "report"))
    leak = tmp_path / "leak.json"
    leak.write_text(json.dumps({"workload": "lcbench", "seeds": [0, 1], "runs": saved(str(report))}))
    with pytest.raises(SystemExit, match="development tasks only"):
        strategy_dev.main(["--goals", str(leak), "--arms", "autotune v"])
