"""results.py: feasibility, the Pareto front and the `select` rules, on trials as Optuna stores them."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState, create_trial

from autotune import config
from autotune.search import results


def cfg_with(select: Any = "knee", objectives: list[str] | None = None) -> config.RunConfig:
    return config.from_dict({"objectives": objectives or ["val_accuracy", "train_time_s"], "select": select})


def trial(number: int, acc: float, time_s: float, **kw: Any) -> FrozenTrial:
    t = create_trial(values=[acc, time_s], user_attrs={"val_accuracy": acc, "train_time_s": time_s}, **kw)
    t.number = number
    return t


# accuracy vs time, all on the front: slower buys accuracy
FRONT = [trial(0, 0.99, 10.0), trial(1, 0.98, 5.0), trial(2, 0.95, 2.0), trial(3, 0.90, 1.0)]


@pytest.mark.parametrize(("within", "picked"), [(0.0, 0), (0.015, 1), (0.05, 2), (0.2, 3)])
def test_fastest_within_picks_the_fastest_trial_near_the_best_accuracy(within: float, picked: int) -> None:
    assert results.select(FRONT, cfg_with({"fastest_within": within})).number == picked


@pytest.mark.parametrize(("under", "picked"), [(100.0, 0), (6.0, 1), (2.0, 2), (1.5, 3)])
def test_most_accurate_under_picks_the_best_accuracy_within_the_time(under: float, picked: int) -> None:
    assert results.select(FRONT, cfg_with({"most_accurate_under_s": under})).number == picked


def test_most_accurate_under_a_time_nothing_meets_falls_back_to_the_fastest() -> None:
    assert results.select(FRONT, cfg_with({"most_accurate_under_s": 0.5})).number == 3


def test_select_rules_read_time_from_user_attrs_when_it_is_not_an_objective() -> None:
    """Objectives accuracy and latency: the rules still compare training time, stored as a user attr."""
    front = [create_trial(values=[0.99, 3.0], user_attrs={"train_time_s": 9.0}),
             create_trial(values=[0.985, 5.0], user_attrs={"train_time_s": 4.0})]
    cfg = cfg_with({"fastest_within": 0.01}, ["val_accuracy", "inference_latency_ms"])
    assert results.select(front, cfg) is front[1]
    cfg = cfg_with({"most_accurate_under_s": 5.0}, ["val_accuracy", "inference_latency_ms"])
    assert results.select(front, cfg) is front[1]


def test_single_objective_picks_the_best_value() -> None:
    cfg = cfg_with(objectives=["val_loss"])
    losses = [create_trial(values=[v]) for v in (0.5, 0.2, 0.9)]
    assert results.select(losses, cfg) is losses[1]
    assert results.select([], cfg) is None


def test_feasible_reads_optuna_constraints_both_ways() -> None:
    assert results.feasible(create_trial(values=[1.0, 1.0]))  # no constraint
    assert results.feasible(create_trial(values=[1.0, 1.0], constraints={"accuracy_drop": 0.0}))
    assert not results.feasible(create_trial(values=[1.0, 1.0], constraints={"accuracy_drop": 0.01}))
    # a sampler's constraints_func stores a list under `constraints`; FrozenTrial.constraints reads it too
    assert not results.feasible(create_trial(values=[1.0, 1.0], system_attrs={"constraints": [-1.0, 0.5]}))


def test_set_constraint_on_a_real_trial_makes_it_infeasible() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])

    def objective(t: optuna.Trial) -> tuple[float, float]:
        t.set_constraint("accuracy_drop", 0.1 if t.number == 1 else -0.1)
        return 0.9 + 0.05 * t.number, 1.0  # trial 1 dominates trial 0, but violates its constraint

    study.optimize(objective, n_trials=2)
    ok, bad = study.trials
    assert results.feasible(ok) and not results.feasible(bad)
    assert results.pareto_front(study.trials, ["maximize", "minimize"]) == [ok]
    assert not results.summarize(bad, ["val_accuracy", "train_time_s"]).feasible


def test_pareto_front_leaves_out_dominated_unfinished_and_non_finite_trials() -> None:
    dominated = trial(4, 0.9, 10.0)
    running = create_trial(state=TrialState.RUNNING)
    inf = create_trial(values=[float("inf"), 0.1])  # Optuna refuses NaN; an infinite value it stores
    front = results.pareto_front([*FRONT, dominated, running, inf], ["maximize", "minimize"])
    assert [t.number for t in front] == [0, 1, 2, 3]


def test_summary_keeps_objectives_and_catalogue_metrics() -> None:
    t = create_trial(values=[0.9, 2.0], params={"lr": 0.01},
                     distributions={"lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True)},
                     user_attrs={"val_f1": 0.8, "samples_per_s": 1000.0, "pruned_shrunk": True, "stop_reason": None,
                                 "history": [{"epoch": 1}]})
    s = results.summarize(t, ["val_f1", "train_time_s"])
    assert s.values == {"val_f1": 0.9, "train_time_s": 2.0}
    assert s.metrics == {"val_f1": 0.8, "samples_per_s": 1000.0}  # no flags, no history
    assert s.row()["params_lr"] == 0.01 and s.row()["feasible"] is True


def test_a_summarys_history_reads_as_the_epoch_records_a_train_result_holds() -> None:
    from autotune.training import EpochRecord

    rec = EpochRecord(epoch=2, train_loss=0.5, epoch_time_s=1.0, train_time_s=2.5, samples_per_s=100.0,
                      data_wait_fraction=0.1, lr=0.01, metrics={"val_accuracy": 0.9, "val_loss": 0.3})
    t = create_trial(values=[0.9], user_attrs={"history": [{"epoch": 1, "val_accuracy": 0.5}, rec.as_dict()]})
    s = results.summarize(t, ["val_accuracy"])
    assert s.history == [{"epoch": 1, "val_accuracy": 0.5}, rec.as_dict()]  # as stored
    old, again = s.records()
    assert again == rec and again.val_accuracy == 0.9  # the same record back
    assert old.epoch == 1 and old.metrics == {"val_accuracy": 0.5} and old.lr != old.lr  # a clock it lacks: NaN


# A front with a 0 on a [0, 1] quality metric: f1 0 @ 2.06 s, 0.135 @ 3.08 s, 0.902 @ 6.14 s (issue 49)
ZERO_FRONT = [(0.0, 2.06), (0.135, 3.08), (0.902, 6.14)]


@pytest.mark.parametrize("name", ["val_f1", "val_iou", "my_score", "val_accuracy", ""])
def test_knee_scales_a_quality_metric_the_same_way_whatever_its_name(name: str) -> None:
    """A [0, 1] quality metric the catalogue does not know is read as val_accuracy is (by its error rate): the
    zero on the front does not send it alone to range scaling while the time stays in log ratios (which picked
    f1 0.135 @ 3.08 s)."""
    front = [trial(i, q, s) for i, (q, s) in enumerate(ZERO_FRONT)]
    assert results.knee(front, ["maximize", "minimize"], [name, "train_time_s"]).number == 2


def test_a_study_whose_own_fit_reports_f1_recommends_what_val_accuracy_would(tmp_path: Any) -> None:
    """Through `select` with a real config: a training function's own `val_f1` objective (outside the catalogue)."""
    front = [trial(i, q, s) for i, (q, s) in enumerate(ZERO_FRONT)]
    (tmp_path / "own_f1.py").write_text("def fit(ctx):\n    pass\n")
    f1 = config.from_dict({"objectives": [{"metric": "val_f1", "direction": "maximize"}, "train_time_s"],
                           "trainer": "own_f1:fit"}, source=str(tmp_path / "run.yaml"))
    assert results.select(front, f1).number == results.select(front, cfg_with()).number == 2


def test_a_catalogue_metric_that_is_not_a_share_keeps_its_ratio() -> None:
    """Only a metric the catalogue does not know is read by its values: samples_per_s in [0, 1] is no accuracy."""
    front = [trial(0, 0.1, 1.0), trial(1, 0.2, 1.9)]  # (twice the samples/s for 1.9x the time)
    picked = results.knee(front, ["maximize", "minimize"], ["samples_per_s", "train_time_s"]).number
    assert picked == 1  # as ratios (0.693 vs 0.642); as error rates (0.9 vs 0.8) the ratio 0.118 would pick 0
