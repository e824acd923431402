"""Stop rules: dominated, slow, vs_front, Pareto rungs in multi-objective studies, and Optuna's own pruners."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState, create_trial

import autotune
from autotune import config
from autotune.core.errors import ConfigError, TrialStopped
from autotune.search import pruners, rungs
from autotune.search.pruners import EPOCH_VALUES
from autotune.study.runner import open_study
from tests.support import tiny

GOOD = {"lr": 3e-3, "optimizer": "adam", "batch_size": 128}
BAD = {"lr": 1e-5, "optimizer": "sgd", "batch_size": 16}  # slower per epoch and barely learning
SPACE = {"lr": {"type": "float", "low": 1e-5, "high": 1e-2, "log": True},
         "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
         "batch_size": {"type": "categorical", "choices": [16, 128]}}


def test_dominated_trial_stopped_before_last_epoch(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, study={"n_trials": 5}, train={"epochs": 4}, space=SPACE,
               pruning={"pruner": "pareto", "pruner_args": {"n_startup_trials": 2, "n_warmup_steps": 1}})
    study = open_study(cfg)
    for _ in range(4):
        study.enqueue_trial(GOOD)
    study.enqueue_trial(BAD)
    res = autotune.run(cfg)
    bad = res.study.trials[4]
    assert bad.state.name == "PRUNED", bad.user_attrs
    assert bad.user_attrs["stop_reason"] == "dominated"
    assert bad.user_attrs["stop_epoch"] < 4
    assert len(bad.user_attrs["history"]) == bad.user_attrs["stop_epoch"]
    # the first two run before the pruner may act (n_startup_trials); later good ones differ only by seed
    assert [t.state.name for t in res.study.trials[:2]] == ["COMPLETE", "COMPLETE"]


def sleepy_study(tmp_path: Path, **sections: Any) -> config.RunConfig:
    """A study of tests/user_fits.py:fit_sleepy: `user.sleep_ms` per step (10 steps an epoch) puts a floor under
    an epoch's time that no machine load can lower, so timing rules act where the test says."""
    raw: dict[str, Any] = {"study": {"name": "s", "storage": f"sqlite:///{tmp_path}/s.db", "n_trials": 1},
                           "trainer": "tests.user_fits:fit_sleepy", "train": {"epochs": 5, "batch_size": 64}}
    raw.update(sections)
    return config.from_dict(raw, source=str(tmp_path / "s.yaml"))


def test_slow_trial_stopped_at_first_epoch_that_shows_it(tmp_path: Path) -> None:
    # >= 0.2 s an epoch, 5 epochs: the speed probe's first timed steps project >= 1 s, over the 0.5 s limit: the
    # trial stops inside its first epoch (stop_epoch 0: none finished)
    cfg = sleepy_study(tmp_path, train={"epochs": 5, "batch_size": 64, "user.sleep_ms": 20},
                       pruning={"slow": {"max_trial_seconds": 0.5}})
    t = autotune.run(cfg).study.trials[0]
    assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "slow"
    assert t.user_attrs["stop_epoch"] == 0
    assert "projected" in t.user_attrs["stop_detail"] and "speed probe" in t.user_attrs["stop_detail"]
    # a limit the whole run fits under: no stop
    cfg = sleepy_study(tmp_path, study={"name": "ok", "storage": f"sqlite:///{tmp_path}/s.db", "n_trials": 1},
                       train={"epochs": 2, "batch_size": 64}, pruning={"slow": {"max_trial_seconds": 600}})
    assert autotune.run(cfg).study.trials[0].state.name == "COMPLETE"


def test_pruned_trials_do_not_break_multi_objective_samplers(tmp_path: Path) -> None:
    for sampler in ("tpe", "nsga2"):
        cfg = tiny(tmp_path, study={"n_trials": 10, "name": sampler, "sampler": sampler,
                                    "sampler_args": {"n_startup_trials": 2} if sampler == "tpe" else
                                    {"population_size": 4}},
                   train={"epochs": 2}, space=SPACE,
                   pruning={"pruner": "pareto", "pruner_args": {"n_startup_trials": 1, "n_warmup_steps": 1,
                                                               "margin": 0.0}})
        study = open_study(cfg)
        for params in (GOOD, GOOD, BAD, BAD):  # two sure prunes early, then the sampler's own proposals
            study.enqueue_trial(params)
        res = autotune.run(cfg)
        states = [t.state.name for t in res.study.trials]
        assert len(states) == 10 and "FAIL" not in states
        assert states[2:4] == ["PRUNED", "PRUNED"], states
        # the six sampled after the pruned ones: the sampler read pruned trials and kept proposing
        assert all(s in ("COMPLETE", "PRUNED") for s in states[4:])


def test_pareto_asha_runs_and_records_reason(tmp_path: Path) -> None:
    space = {"user.sleep_ms": {"type": "categorical", "choices": [0, 50]},
             "user.lr_scale": {"type": "categorical", "choices": [1.0, 1e-4]}}
    cfg = sleepy_study(tmp_path, study={"name": "a", "storage": f"sqlite:///{tmp_path}/s.db", "n_trials": 5,
                                        "sampler": "random"},
                       train={"epochs": 3, "batch_size": 64}, space=space,
                       pruning={"pruner": "pareto_asha", "pruner_args": {"min_epochs": 1, "reduction_factor": 2,
                                                                         "n_startup_trials": 2}})
    study = open_study(cfg)
    good, bad = {"user.sleep_ms": 0, "user.lr_scale": 1.0}, {"user.sleep_ms": 50, "user.lr_scale": 1e-4}
    for params in (good, good, good, bad, bad):  # bad: 25x slower a step (a floor) and barely learning
        study.enqueue_trial(params)
    res = autotune.run(cfg)
    states = [t.state.name for t in res.study.trials]
    assert states[3:] == ["PRUNED", "PRUNED"], states
    pruned = [t for t in res.study.trials if t.state.name == "PRUNED"]
    assert all(t.user_attrs["stop_reason"] == "dominated" for t in pruned)
    assert all(t.user_attrs["stop_epoch"] == 1 for t in pruned[-2:])  # cut at the first rung


def _done(values_per_epoch: list[list[float]], final: list[float], **attrs) -> optuna.trial.FrozenTrial:
    return create_trial(values=final, user_attrs={EPOCH_VALUES: values_per_epoch, **attrs})


def test_pareto_pruner_margin_and_guards() -> None:
    p = pruners.ParetoPruner(["maximize", "minimize"], n_startup_trials=2, n_warmup_steps=2, margin=0.1)
    done = [_done([[0.90, 1.0], [0.95, 2.0]], [0.95, 2.0]), _done([[0.5, 3.0], [0.6, 6.0]], [0.6, 6.0])]
    assert p.dominated_by([0.55, 2.5], 1, done) is None  # warm-up
    assert p.dominated_by([0.55, 2.5], 2, done[:1]) is None  # too few completed trials
    assert p.dominated_by([0.55, 5.0], 2, done) is done[0]
    assert p.dominated_by([0.94, 2.1], 2, done) is None  # dominated, but within the margin


def test_pareto_pruner_stop_gives_the_reason_and_reads_completed_trials_only() -> None:
    p = pruners.ParetoPruner(["maximize", "minimize"], n_startup_trials=1, n_warmup_steps=1, margin=0.1)
    done = _done([[0.9, 1.0]], [0.9, 1.0])
    done.number = 7
    assert p.stop([0.5, 3.0], 1, [done], 5) == "dominated at epoch 1 by trial 7"
    assert p.stop([0.95, 3.0], 1, [done], 5) is None
    pruned = create_trial(state=TrialState.PRUNED, user_attrs={EPOCH_VALUES: [[0.9, 1.0]]})
    assert p.stop([0.5, 3.0], 1, [pruned], 5) is None  # a pruned trial is no reference


def test_pareto_asha_stop_counts_pruned_peers_at_the_rung() -> None:
    p = pruners.ParetoASHAPruner(["maximize", "minimize"], min_epochs=1, reduction_factor=3, n_startup_trials=2)
    peers = [create_trial(state=TrialState.PRUNED, user_attrs={EPOCH_VALUES: [[0.9, 1.0]]}),
             _done([[0.8, 0.5]], [0.8, 0.5]), _done([[0.95, 0.4]], [0.95, 0.4])]
    assert p.stop([0.5, 2.0], 1, peers, 10) == "outside the non-dominated top 1/3 of the trials at rung epoch 1"
    assert p.stop([0.5, 2.0], 1, peers[1:2], 10) is None  # fewer peers than n_startup_trials
    assert p.stop([0.99, 0.3], 1, peers, 10) is None


def test_pareto_pruner_directions_are_the_per_epoch_objectives(tmp_path: Path) -> None:
    three = tiny(tmp_path, objectives=["val_accuracy", "inference_latency_ms", "train_time_s"],
                 pruning={"pruner": "pareto"})
    p = pruners.pareto_pruner(three)
    # `auto` with several objectives: pareto_asha (bench/replay.py's measurement, bench/RESULTS.md)
    auto = pruners.pareto_pruner(tiny(tmp_path, objectives=["val_accuracy", "train_time_s"]))
    assert isinstance(auto, pruners.ParetoASHAPruner) and pruners.AUTO == {"one": "median", "several": "pareto_asha"}
    assert isinstance(p, pruners.ParetoPruner) and p.directions == ["maximize", "minimize"]  # latency: at the end
    asha = tiny(tmp_path, objectives=[{"metric": "val_loss"}, {"metric": "samples_per_s"}],
                pruning={"pruner": "pareto_asha"})
    assert pruners.pareto_pruner(asha).directions == ["minimize", "maximize"]
    assert pruners.pareto_pruner(tiny(tmp_path, objectives=["val_accuracy", "inference_latency_ms"])) is None
    assert pruners.pareto_pruner(tiny(tmp_path, objectives=["val_accuracy"])) is None
    with pytest.raises(config.ConfigError, match=r"pruning\.pruner_args: pareto: .*eta"):
        pruners.pareto_pruner(tiny(tmp_path, objectives=["val_accuracy", "inference_latency_ms"],
                                   pruning={"pruner": "pareto", "pruner_args": {"eta": 2}}))


def test_vs_front_stops_a_much_slower_trial_end_to_end(tmp_path: Path) -> None:
    """Two fast learning trials make the front; a third, 50 ms a step (a floor no load lowers) and barely learning,
    projects far beyond 2 x the slowest front trial and is stopped `slow` by its first timed steps (the speed probe
    applies vs_front too) or at the end of its first epoch."""
    space = {"user.sleep_ms": {"type": "categorical", "choices": [0, 50]},
             "user.lr_scale": {"type": "categorical", "choices": [1.0, 1e-4]}}
    cfg = sleepy_study(tmp_path, study={"name": "v", "storage": f"sqlite:///{tmp_path}/s.db", "n_trials": 3},
                       train={"epochs": 4, "batch_size": 64}, space=space,
                       pruning={"pruner": "none", "slow": {"vs_front": 2.0}})
    study = open_study(cfg)
    for params in ({"user.sleep_ms": 0, "user.lr_scale": 1.0}, {"user.sleep_ms": 0, "user.lr_scale": 1.0},
                   {"user.sleep_ms": 50, "user.lr_scale": 1e-4}):
        study.enqueue_trial(params)
    trials = autotune.run(cfg).study.trials
    assert [t.state.name for t in trials[:2]] == ["COMPLETE", "COMPLETE"]
    slow = trials[2]
    assert slow.state.name == "PRUNED" and slow.user_attrs["stop_reason"] == "slow", slow.user_attrs
    assert slow.user_attrs["stop_epoch"] <= 1 and "slowest Pareto trial" in slow.user_attrs["stop_detail"]
    # without the rule the same trial runs to the end
    off = sleepy_study(tmp_path, study={"name": "w", "storage": f"sqlite:///{tmp_path}/s.db", "n_trials": 1},
                       train={"epochs": 2, "batch_size": 64, "user.sleep_ms": 50, "user.lr_scale": 1e-4},
                       pruning={"pruner": "none"})
    assert autotune.run(off).study.trials[0].state.name == "COMPLETE"


def test_asha_rungs_and_cut() -> None:
    p = pruners.ParetoASHAPruner(["maximize", "minimize"], min_epochs=1, reduction_factor=3, n_startup_trials=2)
    assert p.rungs(10) == [1, 3, 9]
    peers = [_done([[0.9, 1.0]], [0.9, 1.0]), _done([[0.8, 0.5]], [0.8, 0.5]), _done([[0.95, 0.4]], [0.95, 0.4])]
    assert p.cut([0.5, 2.0], 1, peers, 10)  # worst on both: outside the top third
    assert not p.cut([0.99, 0.3], 1, peers, 10)
    assert not p.cut([0.5, 2.0], 2, peers, 10)  # not a rung


def test_vs_front_rule() -> None:
    front = [create_trial(values=[0.95, 1.0], user_attrs={"train_time_s": 1.0,
                                                          "history": [{"epoch": 1, "val_accuracy": 0.9}]})]
    with pytest.raises(TrialStopped) as info:
        pruners.check_vs_front(1.0, 1, 5, 0.8, 2.0, front)  # projects 5 s > 2 x 1 s, no better accuracy
    assert info.value.reason == "slow"
    pruners.check_vs_front(1.0, 1, 5, 0.95, 2.0, front)  # more accurate than the front was: keep going
    pruners.check_vs_front(0.3, 1, 5, 0.8, 2.0, front)  # projects 1.5 s: within the factor
    # a user metric to minimize (val_mae): better means lower
    mae_front = [create_trial(values=[0.2, 1.0], user_attrs={"train_time_s": 1.0,
                                                             "history": [{"epoch": 1, "val_mae": 0.3}]})]
    with pytest.raises(TrialStopped):
        pruners.check_vs_front(1.0, 1, 5, 0.4, 2.0, mae_front, "val_mae", "minimize")
    pruners.check_vs_front(1.0, 1, 5, 0.25, 2.0, mae_front, "val_mae", "minimize")


def test_hung_trial_stopped_mid_epoch(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, model={"factory": "tests.factories:sleepy"}, study={"n_trials": 2},
               train={"epochs": 3, "batch_size": 64}, pruning={"slow": {"hang_seconds": 0.7}})
    t0 = __import__("time").perf_counter()
    res = autotune.run(cfg)
    assert __import__("time").perf_counter() - t0 < 20  # an epoch alone would take 23 x 0.2 s per trial
    for t in res.study.trials:
        assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "hang"
        assert t.user_attrs["stop_epoch"] == 0 and "hung" in t.user_attrs["stop_detail"]


# ---------------------------------------------------------------- the registry: every pruner prunes something
# A name whose builder made a NopPruner (or a pruner that never acts) fails here: each registered pruner, built as
# a study builds it, must stop a clearly worse trial; `none` must stop nothing.

PRUNER_ARGS = {"threshold": {"lower": 0.3}}  # pruners that act only on a bound the user gives


def _curve(quality: float, step: int) -> float:
    """A learning curve rising to `quality`."""
    return quality * (1 - 0.5 ** step)


@pytest.mark.parametrize("name", [n for n, k in pruners.PRUNERS.items() if k.objectives != "several"])
def test_every_single_objective_pruner_prunes_a_worse_trial(name: str) -> None:
    cfg = config.from_dict({"objectives": ["val_accuracy"], "train": {"epochs": 10},
                            "pruning": {"pruner": name, "pruner_args": PRUNER_ARGS.get(name, {})}})
    pruner = pruners.optuna_pruner(cfg)

    def objective(trial: optuna.Trial) -> float:
        quality = (0.9 if trial.number % 2 == 0 else 0.2) + 0.001 * trial.number  # good, bad, good, ...
        for step in range(1, 11):
            trial.report(_curve(quality, step), step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return _curve(quality, 10)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", pruner=pruner, sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=16)
    pruned = [t.number for t in study.trials if t.state.name == "PRUNED"]
    if name == "none":
        assert isinstance(pruner, optuna.pruners.NopPruner) and pruned == []
        return
    assert not isinstance(pruner, optuna.pruners.NopPruner)
    assert any(n % 2 == 1 for n in pruned), f"{name} ({type(pruner).__name__}) pruned no bad trial"
    assert study.best_trial.number % 2 == 0 and study.best_trial.state.name == "COMPLETE"


@pytest.mark.parametrize("name", [n for n, k in pruners.PRUNERS.items() if k.objectives == "several"])
def test_every_pareto_pruner_prunes_a_dominated_trial(name: str) -> None:
    cfg = config.from_dict({"pruning": {"pruner": name}})  # val_accuracy (max), train_time_s (min)
    pruner = pruners.pareto_pruner(cfg)
    assert pruner is not None and not isinstance(pruner, optuna.pruners.NopPruner)
    assert pruners.optuna_pruner(cfg).__class__ is optuna.pruners.NopPruner  # Optuna's should_prune cannot here
    study = optuna.create_study(directions=cfg.directions)
    for i in range(6):  # completed trials: accurate and fast after each of three epochs
        per_epoch = [[0.85 + 0.01 * i + 0.03 * e, 1.0 + e] for e in range(3)]
        study.add_trial(_done(per_epoch, per_epoch[-1]))

    done = study.get_trials(deepcopy=False)
    worse = [[0.3, 5.0], [0.35, 10.0], [0.4, 15.0]]  # less accurate and slower at every epoch
    better = [[0.95, 0.5], [0.97, 1.0], [0.99, 1.5]]
    assert any(pruner.stop(worse[e - 1], e, done, 3) for e in (1, 2, 3)), name
    assert not any(pruner.stop(better[e - 1], e, done, 3) for e in (1, 2, 3)), name


def test_unknown_pruner_is_one_line_with_close_match() -> None:
    with pytest.raises(ConfigError) as info:
        config.from_dict({"pruning": {"pruner": "medain"}})
    assert str(info.value) == "<config>: pruning.pruner: unknown pruner 'medain' (did you mean 'median'?); " \
        "allowed: " + ", ".join(sorted(["auto", *pruners.PRUNERS]))


def test_pruner_for_the_other_number_of_objectives() -> None:
    with pytest.raises(ConfigError, match=r"pruning\.pruner: pareto is for studies with two or more objectives; "
                                          r"for one use none, median, percentile, successive_halving, hyperband, "
                                          r"threshold, wilcoxon$"):
        config.from_dict({"objectives": ["val_accuracy"], "pruning": {"pruner": "pareto"}})
    with pytest.raises(ConfigError, match=r"pruning\.pruner: Optuna's median pruner cannot prune a study with "
                                          r"several objectives; use pareto, pareto_asha or none$"):
        config.from_dict({"pruning": {"pruner": "median"}})


# a rung table of 9 (accuracy up, time down) points in three known fronts of three
RUNG = {"A": [0.95, 5.0], "B": [0.90, 2.0], "C": [0.80, 1.0],  # front 0
        "D": [0.93, 6.0], "E": [0.85, 3.0], "F": [0.75, 1.5],  # front 1: each dominated by one of front 0
        "G": [0.90, 7.0], "H": [0.70, 4.0], "I": [0.60, 2.5]}  # front 2
MO = ["maximize", "minimize"]


def test_pareto_asha_judges_each_trial_against_the_rung_so_far_and_keeps_exactly_the_top_third() -> None:
    p = pruners.ParetoASHAPruner(MO, min_epochs=1, reduction_factor=3, n_startup_trials=3)
    assert p.rungs(10) == [1, 3, 9] and p.rungs(3) == [1]
    kept = []
    for name, v in RUNG.items():  # each one arriving last at rung 1, the other eight already there
        others = [_done([w, w], w) for n, w in RUNG.items() if n != name]
        if p.stop(v, 1, others, 10) is None:
            kept.append(name)
    assert kept == ["A", "B", "C"]
    others = [_done([w] * 3, w) for n, w in RUNG.items() if n != "D"]
    assert p.stop(RUNG["D"], 2, others, 10) is None  # epoch 2 is no rung
    assert p.stop(RUNG["D"], 3, others, 10) is not None  # epoch 3 is
    assert p.stop(RUNG["I"], 1, others[:2], 10) is None  # two others at the rung: too few to judge, it goes on


def test_pareto_asha_args_are_checked(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match=r"pruning\.pruner_args: pareto_asha: .*reduction_factor >= 2"):
        pruners.pareto_pruner(tiny(tmp_path, pruning={"pruner": "pareto_asha",
                                                      "pruner_args": {"reduction_factor": 1}}))


def _learning(acc, s_per_epoch: float, epochs: int) -> list[list[float]]:
    return [[acc(e), s_per_epoch * e] for e in range(1, epochs + 1)]


def test_forecast_judges_a_trial_by_where_its_learning_curve_is_heading() -> None:
    fast = _learning(lambda e: 0.9 - 0.1 * math.exp(-e), 1.0, 10)  # learns at once, levels at 0.9 in 10 s
    done = [_done(fast, fast[-1]) for _ in range(4)]
    for i, t in enumerate(done):
        t.number = i
    same_epoch = pruners.ParetoPruner(MO, n_warmup_steps=2)
    ahead = pruners.ParetoPruner(MO, n_warmup_steps=2, forecast=True, metrics=["val_accuracy", "train_time_s"])
    late = _learning(lambda e: 0.97 - 0.9 * math.exp(-0.35 * e), 1.2, 4)  # slow start, heading for 0.94 in 12 s
    assert same_epoch.stop(late[-1], 4, done, 10, curve=late) == "dominated at epoch 4 by trial 0"
    assert ahead.stop(late[-1], 4, done, 10, curve=late) is None
    flat = _learning(lambda e: 0.5 - 0.2 * math.exp(-e), 1.2, 4)  # heading for 0.5 in 12 s: behind trial 0's end
    why = ahead.stop(flat[-1], 4, done, 10, curve=flat)
    assert why is not None and why.startswith("heading for val_accuracy 0.5") and "12 at epoch 10" in why
    assert why.endswith("dominated by trial 0")
    # two epochs: no curve to fit yet, so no verdict (the same-epoch rule would stop this slow learner)
    assert same_epoch.stop(late[1], 2, done, 10) == "dominated at epoch 2 by trial 0"
    assert ahead.stop(late[1], 2, done, 10, curve=late[:2]) is None


def test_keep_leaders_spares_a_dominated_trial_among_the_most_accurate_at_its_epoch() -> None:
    best = _learning(lambda e: 0.4 + 0.1 * e, 0.5 / 3, 10)  # at epoch 3: accuracy 0.7 in 0.5 s
    rest = _learning(lambda e: 0.2 + 0.1 * e, 0.5 / 3, 10)  # at epoch 3: 0.5 in 0.5 s
    done = [_done(c, c[-1]) for c in (best, rest, rest, rest)]
    for i, t in enumerate(done):
        t.number = i
    slow_learner = [0.6, 2.0]  # at epoch 3: behind trial 0 on both, ahead of the other three on accuracy
    plain = pruners.ParetoPruner(MO, n_warmup_steps=2)
    half = pruners.ParetoPruner(MO, n_warmup_steps=2, keep_leaders=0.5, metrics=["val_accuracy", "train_time_s"])
    quarter = pruners.ParetoPruner(MO, n_warmup_steps=2, keep_leaders=0.25, metrics=["val_accuracy", "train_time_s"])
    assert plain.stop(slow_learner, 3, done, 10) == "dominated at epoch 3 by trial 0"
    assert half.stop(slow_learner, 3, done, 10) is None  # in the top half of accuracy at epoch 3: goes on
    assert quarter.stop(slow_learner, 3, done, 10) == "dominated at epoch 3 by trial 0"  # the top quarter is 0.7
    with pytest.raises(ValueError, match="keep_leaders must be a share"):
        pruners.ParetoPruner(MO, keep_leaders=1.5, metrics=["val_accuracy", "train_time_s"])


def test_forecast_is_a_pruner_arg(tmp_path: Path) -> None:
    p = pruners.pareto_pruner(tiny(tmp_path, pruning={"pruner": "pareto", "pruner_args": {"forecast": True}}))
    assert p.forecast and p.metrics == ["val_accuracy", "train_time_s"]
    assert not pruners.pareto_pruner(tiny(tmp_path, pruning={"pruner": "pareto"})).forecast
    with pytest.raises(ValueError, match="forecast and keep_leaders need the name of every objective"):
        pruners.ParetoPruner(MO, forecast=True)


def _front_trial(acc: float, time_s: float) -> optuna.trial.FrozenTrial:
    return create_trial(values=[acc, time_s], user_attrs={"val_accuracy": acc, "train_time_s": time_s})


def test_front_gain_stops_a_candidate_whose_best_case_barely_moves_the_front(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, pruning={"slow": {"min_front_gain": 0.01, "front_margin": 0.02}})
    front = [_front_trial(0.90, 1.0), _front_trial(0.95, 3.0)]  # time box 2 x 3 s; hypervolume 4.65
    with pytest.raises(TrialStopped) as e:  # best case 0.97 in 5 s adds 0.02 x 1 s: 0.4%
        pruners.check_front_gain(cfg, front, 5.0, "100 samples/s (speed probe: trial 0, uncontended)")
    assert e.value.reason == "dominated" and e.value.epoch == 0
    assert e.value.detail.startswith("predicted 5.0s at 100 samples/s (speed probe: trial 0, uncontended) behind "
                                     "the front: even at val_accuracy 0.97 (the front's best 0.95 + 0.02) it would "
                                     "add 0.4%")
    with pytest.raises(TrialStopped):  # beyond the time box: nothing to add
        pruners.check_front_gain(cfg, front, 7.0, "x")
    pruners.check_front_gain(cfg, front, 2.0, "x")  # between the front's points: adds 0.13 (2.8%)
    pruners.check_front_gain(cfg, front, 0.5, "x")  # faster than the whole front
    pruners.check_front_gain(tiny(tmp_path), front, 7.0, "x")  # the rule is off by default
    pruners.check_front_gain(cfg, [], 7.0, "x")  # no front yet


def test_a_candidate_predicted_behind_the_front_is_stopped_before_it_trains(tmp_path: Path) -> None:
    """Five fast trials finish (the front); a 4x slower combination's probe predicts a time at which even the
    front's best accuracy + the margin adds nothing: stopped at epoch 0, `dominated`, the reason stored; the
    second trial of that combination is stopped by what the study knew, before its first step."""
    cfg = sleepy_study(tmp_path, study={"name": "g", "storage": f"sqlite:///{tmp_path}/s.db", "n_trials": 7},
                       train={"epochs": 3, "batch_size": 64, "device": "cpu"},
                       space={"user.sleep_ms": {"type": "categorical", "choices": [0, 8]}},
                       pruning={"pruner": "pareto", "slow": {"min_front_gain": 0.05}})
    study = open_study(cfg)
    for ms in (0,) * pruners.FRONT_GAIN_STARTUP + (8, 8):
        study.enqueue_trial({"user.sleep_ms": ms})
    trials = autotune.run(cfg).study.trials
    assert all(t.state.name == "COMPLETE" for t in trials[:pruners.FRONT_GAIN_STARTUP])
    slow, again = trials[pruners.FRONT_GAIN_STARTUP:]
    for t in (slow, again):
        assert t.state.name == "PRUNED" and t.user_attrs["stop_reason"] == "dominated", t.user_attrs
        assert t.user_attrs["stop_epoch"] == 0 and "behind the front" in t.user_attrs["stop_detail"]
    assert again.user_attrs.get("history", []) == []


def test_front_gain_waits_for_enough_completed_trials(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, pruning={"slow": {"min_front_gain": 0.01}})
    study = open_study(cfg)
    for _ in range(pruners.FRONT_GAIN_STARTUP - 1):
        study.add_trial(_front_trial(0.9, 1.0))
    pruners.check_front_gain_in(study, cfg, 50.0, "x")  # one trial short: no verdict
    study.add_trial(_front_trial(0.9, 1.0))
    with pytest.raises(TrialStopped, match="behind the front"):
        pruners.check_front_gain_in(study, cfg, 50.0, "x")


def _warmup_curves(n: int, epochs: int, seed: int = 0) -> list[list[float]]:
    """Hand-made curves where epoch 1 says nothing (an untrained network: noise) and epoch 2 on follows each
    configuration's own final accuracy."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        final = rng.uniform(0.5, 0.95)
        out.append([rng.uniform(0.05, 0.15)] + [final * (1 - 0.5 ** e) for e in range(1, epochs)])
    return out


def test_learned_first_rung_skips_an_uninformative_first_epoch() -> None:
    p = pruners.ParetoASHAPruner(MO, reduction_factor=3, metrics=["val_accuracy", "train_time_s"],
                                 first_rung="proven")
    assert p.min_epochs == "auto"
    done = [_done([[a, 1.0 + e] for e, a in enumerate(c)], [c[-1], 12.0]) for c in _warmup_curves(12, 12)]
    assert p.rungs(12, done[:3]) == []  # three trials prove nothing: no rung cuts yet
    assert p.stop([0.01, 50.0], 1, done[:3], 12) is None
    assert p.rungs(12, done) == [2, 6]  # epoch 1's ranks are noise, epoch 2's agree with epoch 6's
    assert p.learned.first == 2
    table = {a.rung: a for a in p.learned.table()}
    assert table[1].rho < 0.5 <= table[2].rho
    assert p.stop([0.01, 50.0], 1, done, 12) is None  # epoch 1 is no rung
    assert p.stop([0.01, 50.0], 2, done, 12) is not None  # epoch 2 is
    # the study is read at the ladder's rungs and at the candidate first rungs below it, not at every epoch
    assert [e for e in range(1, 13) if p.judges(e, 12)] == [1, 2, 6]


def test_optimistic_first_rung_cuts_at_once_and_moves_up_when_its_ranks_are_disproven() -> None:
    """The default: a study cuts from epoch 1 before any evidence, and the curves of the trials that passed epoch 1
    move the first rung up once they show epoch 1's ranks disagree with the next rung's (a warm-up's coin flip)."""
    p = pruners.ParetoASHAPruner(MO, reduction_factor=3, metrics=["val_accuracy", "train_time_s"])
    curves = _warmup_curves(30, 12)
    done = [_done([[a, 1.0 + e] for e, a in enumerate(c)], [c[-1], 12.0]) for c in curves]
    assert p.rungs(12, done[:3]) == [1, 3, 9]  # no evidence against any rung: the whole ladder cuts
    peers = done[:3]
    assert p.stop([0.01, 50.0], 1, peers, 12) is not None  # the worst trial at epoch 1 is cut at once
    # 8 trials reached epoch 3: epoch 1's ranks (noise) are disproven there; epoch 2's agree with epoch 6's
    assert p.rungs(12, done[:8]) == [2, 6]
    table = {a.rung: a for a in p.learned.table()}
    assert table[1].disproven() and not table[2].disproven()
    assert p.stop([0.01, 50.0], 1, done[:8], 12) is None  # epoch 1 no longer cuts
    assert p.stop([0.01, 50.0], 2, done[:8], 12) is not None


def test_optimistic_rung_stays_where_ranks_agree_even_from_promoted_trials_only() -> None:
    """Curves whose ranks hold from epoch 1 (no warm-up): the trials that passed epoch 1 (the top third, a narrow
    spread of quality) keep epoch 1 as the first rung; their correlation reads lower than the population's, and a
    rung is kept unless the evidence is clearly against it."""
    import random

    rng = random.Random(1)
    curves = []
    for _ in range(60):
        final = rng.uniform(0.5, 0.95)
        curves.append([final * (1 - 0.5 ** e) + rng.gauss(0, 0.01) for e in range(1, 13)])
    ranked = sorted(curves, key=lambda c: c[0], reverse=True)
    # what the rung at epoch 1 let through run on; the others stopped there (their curves end at epoch 1)
    table = [*ranked[:20], *([c[0]] for c in ranked[20:])]
    learned = rungs.LearnedRungs(3)
    assert learned.update(table, 12) == [1, 3, 9]
    assert rungs.LearnedRungs(3, optimistic=False).update(table, 12)[:1] == [1]
    # the agreement is corrected for the promoted trials' narrower spread: nearer the whole population's
    everyone = rungs.spearman([c[0] for c in curves], [c[2] for c in curves])
    promoted = rungs.spearman([c[0] for c in ranked[:20]], [c[2] for c in ranked[:20]])
    corrected = learned.agreement(table, 1, 12).rho
    assert promoted < corrected <= 1.0 and abs(corrected - everyone) < abs(promoted - everyone)


def test_range_restriction_correction() -> None:
    assert rungs.unrestricted(0.5, [0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]) == 0.5  # nothing selected
    assert rungs.unrestricted(0.0, [0.0, 10.0], [4.0, 5.0]) == 0.0  # no agreement stays none
    assert 0.5 < rungs.unrestricted(0.5, [0.0, 10.0], [4.0, 5.0]) < 1.0
    assert rungs.unrestricted(-0.3, [0.0, 10.0], [4.0, 5.0]) < -0.3  # a disagreement is corrected too


def test_most_accurate_trial_of_a_rung_is_promoted_even_when_dominated() -> None:
    # the trial (0.95 in 9 s) ties the most accurate peer, which is faster: dominated at the rung, and outside
    # MOASHA's top third; the accurate end's share of promotions keeps it
    peers = [_done([v], v) for v in ([0.95, 5.0], [0.6, 1.0], [0.7, 1.5], [0.8, 2.0], [0.85, 3.0], [0.9, 4.0])]
    moasha = pruners.ParetoASHAPruner(MO, min_epochs=1, accurate_share=0.0)
    kept = pruners.ParetoASHAPruner(MO, min_epochs=1)
    assert moasha.stop([0.95, 9.0], 1, peers, 10) is not None
    assert kept.stop([0.95, 9.0], 1, peers, 10) is None
    # the second most accurate (dominated by the first), where two slots go by accuracy
    more = peers + [_done([v], v) for v in ([0.5, 0.5], [0.55, 0.8], [0.65, 1.2])]
    assert moasha.stop([0.93, 9.0], 1, more, 10) is not None
    assert pruners.ParetoASHAPruner(MO, min_epochs=1, accurate_share=0.5).stop([0.93, 9.0], 1, more, 10) is None


def _running(values_per_epoch: list[list[float]] | None) -> optuna.trial.FrozenTrial:
    """Another worker's trial, still running: its curve so far stored at its last rung (or nothing yet)."""
    attrs = {EPOCH_VALUES: values_per_epoch} if values_per_epoch is not None else {}
    return create_trial(state=TrialState.RUNNING, user_attrs=attrs)


def test_pareto_asha_counts_other_workers_running_trials_at_the_rung() -> None:
    # ASHA's rung table: a trial is in it once it passed the rung, finished or not (several workers: the first
    # wave is judged against each other instead of all running to their end)
    p = pruners.ParetoASHAPruner(MO, min_epochs=1, reduction_factor=3, n_startup_trials=3)
    ahead = [_running([[0.9, 1.0]]), _running([[0.85, 0.8], [0.9, 1.6]]), _running([[0.95, 0.9]])]
    assert p.stop([0.5, 2.0], 1, ahead, 10) is not None
    assert p.stop([0.5, 2.0], 1, ahead[:2] + [_running(None)], 10) is None  # one not at the rung yet: too few
    assert p.stop([0.99, 0.5], 1, ahead, 10) is None


def test_learned_rungs_are_proven_by_running_trials_partial_curves() -> None:
    p = pruners.ParetoASHAPruner(MO, reduction_factor=3, metrics=["val_accuracy", "train_time_s"],
                                 first_rung="proven")
    partial = [_running([[a, 1.0 + e] for e, a in enumerate(c[:6])]) for c in _warmup_curves(12, 12)]
    assert p.rungs(12, partial[:3]) == []
    assert p.rungs(12, partial) == [2]  # epochs 2 and 6 seen in every curve so far; 6 vs 12 not yet
    grown = [_running([[a, 1.0 + e] for e, a in enumerate(c)]) for c in _warmup_curves(12, 12)]
    assert p.rungs(12, grown) == [2, 6]  # the same trials, further on: the ladder is recomputed


def test_a_finished_trials_curve_is_read_once_and_a_running_ones_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # the learned rungs read every rung-table trial's curve at every cut: a finished trial's does not change
    p = pruners.ParetoASHAPruner(MO, metrics=["val_accuracy", "train_time_s"])
    study = optuna.create_study(directions=MO)
    trial = study.ask()
    reads: list[int] = []
    of = pruners.TrialRecord.of
    monkeypatch.setattr(pruners.TrialRecord, "of", lambda t: reads.append(t.number) or of(t))
    trial.set_user_attr(EPOCH_VALUES, [[0.5, 1.0]])
    assert p._curves(study.get_trials()) == [[0.5]]
    trial.set_user_attr(EPOCH_VALUES, [[0.5, 1.0], [0.6, 2.0]])  # running: its curve grows in place
    assert p._curves(study.get_trials()) == [[0.5, 0.6]]
    study.tell(trial, state=TrialState.PRUNED)
    assert p._curves(study.get_trials()) == p._curves(study.get_trials()) == [[0.5, 0.6]]
    assert reads == [0, 0, 0]  # twice running, once finished


def test_a_trial_too_alone_at_a_rung_to_be_ranked_is_held_to_the_studys_timeout(tmp_path: Path) -> None:
    # the first trials on one worker have nothing to be ranked against: one stops once its training, projected to
    # its last epoch, passes alone_share of the study's timeout; ranked trials, trials beside other workers' and
    # studies without a timeout never do
    names = ["val_accuracy", "train_time_s"]
    p = pruners.ParetoASHAPruner(MO, min_epochs=1, reduction_factor=3, n_startup_trials=3, metrics=names,
                                 alone_share=0.25)
    p.budget_s = 1000.0
    why = p.stop([0.5, 30.0], 1, [], 10)  # 30 s an epoch: 300 s projected, over 250
    assert why is not None and "projected 300s" in why and "0.25 of the study's timeout (1000s)" in why
    assert p.stop([0.5, 20.0], 1, [], 10) is None  # 200 s projected: it goes on
    ranked = [_done([[0.9, 1.0]], [0.9, 1.0]), _done([[0.8, 1.0]], [0.8, 1.0]), _done([[0.7, 1.0]], [0.7, 1.0])]
    assert p.stop([0.99, 30.0], 1, ranked, 10) is None  # three at the rung: ranked (and the most accurate)
    assert p.stop([0.5, 270.0], 9, [], 10) is not None  # a later rung alone too (300 s projected)
    assert p.stop([0.5, 30.0], 1, [_running([[0.9, 1.0]])], 10) is None  # another worker's trial runs: not alone
    p.budget_s = None
    assert p.stop([0.5, 30.0], 1, [], 10) is None  # no timeout: nothing to hold it to
    default = pruners.ParetoASHAPruner(MO, min_epochs=1, n_startup_trials=3, metrics=names)
    default.budget_s = 1000.0
    assert default.alone_share == pruners.ALONE_SHARE == 0.2 and default.stop([0.5, 30.0], 1, [], 10) is not None
    off = pruners.ParetoASHAPruner(MO, min_epochs=1, n_startup_trials=3, metrics=names, alone_share=None)
    off.budget_s = 1000.0
    assert off.stop([0.5, 30.0], 1, [], 10) is None  # alone_share null: never
    built = pruners.pareto_pruner(tiny(tmp_path, study={"timeout": 600.0},
                                       pruning={"pruner": "pareto_asha", "pruner_args": {"alone_share": 0.25}}))
    assert isinstance(built, pruners.ParetoASHAPruner) and built.budget_s == 600.0
    with pytest.raises(config.ConfigError, match=r"pruning\.pruner_args: pareto_asha: .*alone_share"):
        pruners.pareto_pruner(tiny(tmp_path, pruning={"pruner": "pareto_asha", "pruner_args": {"alone_share": 2}}))
