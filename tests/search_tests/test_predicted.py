"""The predicted front (search/predicted.py): a pool of K candidates per trial (the inner sampler's proposal, points
near the front's members, uniform points), the one predicted to add most to the front runs, every EXPLORE_EVERY-th
trial the inner sampler's own; candidates are whole points of the space, what it predicts is learned from the trials'
curves (a clock extrapolated log-linearly), and the config says where it applies."""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from autotune import config
from autotune.core.errors import ConfigError
from autotune.search import EPOCH_VALUES, predicted, samplers, space
from autotune.search.predicted import AUTO_K, EXPLORE_EVERY, MIN_TRIALS, Model, PredictedFront, draw, n_candidates
from autotune.search.space import distribution

SPACE = {
    "epochs": {"type": "int", "low": 2, "high": 20},
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "optimizer": {"type": "categorical", "choices": ["sgd", "adam"]},
    "momentum": {"type": "float", "low": 0.0, "high": 0.9, "when": {"optimizer": "sgd"}},
    "batch_size": {"type": "categorical", "choices": [32, 128, 512]},
    "model.channels": {"type": "categorical", "choices": [[8, 16], [16, 32]]},
}
TWO = [{"metric": "val_accuracy", "direction": "maximize"}, {"metric": "train_time_s", "direction": "minimize"}]


def _cfg(tmp_path: Path, study: dict[str, Any] | None = None, **over: Any) -> config.RunConfig:
    raw: dict[str, Any] = {"study": {"name": "p", "storage": f"sqlite:///{tmp_path}/p.db", **(study or {})},
                           "objectives": TWO, "space": SPACE}
    raw.update(over)
    return config.from_dict(raw, source=str(tmp_path / "p.yaml"))


def _curve(settings: dict[str, Any]) -> list[list[float]]:
    """A made-up but lawful training: accuracy rises with epochs towards a ceiling set by lr (best near 1e-2) and
    the optimizer; time per epoch falls with the batch size."""
    ceiling = 0.95 - 0.1 * abs(math.log10(settings["lr"]) + 2) - (0.1 if settings["optimizer"] == "sgd" else 0.0)
    per_epoch = 0.05 * 512 / settings["batch_size"]
    return [[ceiling * (1 - math.exp(-e / 4)), per_epoch * e] for e in range(1, int(settings["epochs"]) + 1)]


def _objective(cfg: config.RunConfig):  # type: ignore[no-untyped-def]
    def run(trial: optuna.Trial) -> tuple[float, float]:
        settings = space.sample(trial, cfg)
        curve = _curve(settings)
        trial.set_user_attr(EPOCH_VALUES, curve)
        return curve[-1][0], curve[-1][1]
    return run


class Spy(PredictedFront):
    """Records each trial's candidates and the one chosen."""

    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        self.seen: list[tuple[list[dict[str, Any]], int]] = []
        self.accurate: list[int] = []  # the trials chosen for the accurate end

    def _choose(self, data: Any, cands: list[dict[str, Any]], accurate: bool = False) -> int:
        i = super()._choose(data, cands, accurate)
        self.seen.append((cands, i))
        return i

    def _accurate(self, trial: FrozenTrial) -> bool:
        if super()._accurate(trial):
            self.accurate.append(trial.number)
            return True
        return False


def test_after_its_start_trials_run_the_chosen_whole_candidate_or_the_inner_samplers_own(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    inner = optuna.samplers.TPESampler(seed=1, n_startup_trials=samplers.TPE_STARTUP_TRIALS)
    spy = Spy(inner, cfg, 6, seed=1)
    study = optuna.create_study(directions=cfg.directions, sampler=spy)
    study.optimize(_objective(cfg), n_trials=MIN_TRIALS + 6)
    chosen = [t for t in study.trials[MIN_TRIALS:] if t.number % EXPLORE_EVERY != EXPLORE_EVERY - 1]
    assert len(spy.seen) == len(chosen) == 6 - 6 // EXPLORE_EVERY  # a choice per trial but every EXPLORE_EVERY-th
    for t, (cands, i) in zip(chosen, spy.seen):
        assert len(cands) == 6
        assert t.params == cands[i]  # every parameter of the trial is the chosen candidate's
        assert ("momentum" in t.params) == (t.params["optimizer"] == "sgd")  # a `when` holds in a candidate too
        assert t.params["model.channels"] in ('[8, 16]', '[16, 32]')  # list choices as the space stores them


def test_random_every_gives_some_exploring_trials_uniform_values(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # the dev knob (off by default): every RANDOM_EVERY-th exploring trial is proposed by the random stream
    monkeypatch.setattr(predicted, "RANDOM_EVERY", 2)
    cfg = _cfg(tmp_path)
    inner = optuna.samplers.TPESampler(seed=1, n_startup_trials=samplers.TPE_STARTUP_TRIALS)
    spy = Spy(inner, cfg, 6, seed=1)
    modes: dict[int, str] = {}
    spy.after_trial = lambda study, trial, state, values: modes.setdefault(  # type: ignore[method-assign]
        trial.number, spy._modes.get(trial.number, "-"))
    study = optuna.create_study(directions=cfg.directions, sampler=spy)
    study.optimize(_objective(cfg), n_trials=MIN_TRIALS + 8)
    late = {n: m for n, m in modes.items() if n >= MIN_TRIALS + EXPLORE_EVERY}
    exploring = [n for n in late if n % EXPLORE_EVERY == EXPLORE_EVERY - 1]
    assert exploring and all(late[n] == ("random" if (n // EXPLORE_EVERY) % 2 == 1 else "inner") for n in exploring)
    assert len(spy.seen) == len([n for n in modes if n >= MIN_TRIALS and n % EXPLORE_EVERY != EXPLORE_EVERY - 1])


def test_the_candidate_predicted_to_add_most_to_the_front_is_chosen(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    study = optuna.create_study(directions=cfg.directions)
    rng = random.Random(0)
    for _ in range(40):  # trials spread over the space, each with its curve
        p = {"epochs": rng.randint(2, 20), "lr": 10 ** rng.uniform(-4, -1), "optimizer": rng.choice(["sgd", "adam"]),
             "batch_size": rng.choice([32, 128, 512]), "model.channels": rng.choice(['[8, 16]', '[16, 32]'])}
        if p["optimizer"] == "sgd":
            p["momentum"] = 0.5
        curve = _curve(p)
        study.add_trial(create_trial(params=p, distributions={k: distribution(cfg.space[k]) for k in p},
                                     values=curve[-1], user_attrs={EPOCH_VALUES: curve}))
    sampler = PredictedFront(optuna.samplers.RandomSampler(), cfg, 3, seed=0)
    data = sampler._data(study)
    assert data is not None
    good = {"epochs": 12, "lr": 1e-2, "optimizer": "adam", "batch_size": 512, "model.channels": '[8, 16]'}
    slow = {**good, "batch_size": 32}  # the same accuracy, 16x the time per epoch
    poor = {**good, "lr": 1e-4, "optimizer": "sgd", "momentum": 0.5}  # the same time, a lower ceiling
    assert sampler._choose(data, [slow, poor, good]) == 2
    assert sampler._choose(data, [good, slow, poor]) == 0


def test_the_accurate_choice_is_the_candidate_most_accurate_at_its_optimistic_point(tmp_path: Path) -> None:
    # the accurate end kept in the proposals: accuracy alone (the clock ignored), where a candidate's optimistic
    # point is beyond the front's best; where none is, the hypervolume choice
    sampler = PredictedFront(optuna.samplers.RandomSampler(), _cfg(tmp_path), 3, seed=0)
    front = [[-0.9, math.log(10.0)], [-0.8, math.log(1.0)]]  # minimized: -accuracy, log seconds
    hope = np.array([[-0.85, -3.0], [-0.95, 5.0], [-0.92, 1.0]])
    assert sampler._most_accurate(front, hope) == 1  # the slowest, but the most accurate
    assert sampler._most_accurate(front, hope[[0]]) is None  # the fastest, not more accurate: no accurate choice


def test_a_clocks_optimistic_point_is_its_prediction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a measured cost gets no optimism (its spread x 0); a measure of quality OPTIMISM spreads
    sampler = PredictedFront(optuna.samplers.RandomSampler(), _cfg(tmp_path), 3, seed=0)
    assert sampler._optimism().tolist() == [predicted.OPTIMISM, 0.0]  # (val_accuracy, train_time_s)
    monkeypatch.setattr(predicted, "COST_OPTIMISM", 1.0)
    assert sampler._optimism().tolist() == [predicted.OPTIMISM, predicted.OPTIMISM]
    three = _cfg(tmp_path, objectives=[*TWO, {"metric": "model_params", "direction": "minimize"}])
    monkeypatch.setattr(predicted, "COST_OPTIMISM", 0.0)
    assert PredictedFront(optuna.samplers.RandomSampler(), three, 3, seed=0)._optimism().tolist() == [
        predicted.OPTIMISM, 0.0, 0.0]  # a size is a cost too


def test_a_costs_optimism_shrinks_with_the_trials_already_run_near_a_candidate(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # the count bonus: a crowded corner loses its hope on the time, an unexplored region keeps it
    seen = np.array([[0.0, 0.0], [0.01, 0.0], [0.0, 0.02], [0.5, 0.5]])
    rows = np.array([[0.0, 0.0], [0.5, 0.5], [0.95, 0.05]])
    share = predicted.near_share(rows, seen, 0.1)
    assert share[0] < share[1] < share[2] and share[2] == pytest.approx(1.0, abs=1e-3)
    assert share[1] == pytest.approx(1 / math.sqrt(2.0), rel=1e-3)  # one trial exactly there
    assert share[0] == pytest.approx(1 / math.sqrt(4.0), rel=0.02)  # three trials nearly there
    assert predicted.near_share(rows, None, 0.1).tolist() == [1.0, 1.0, 1.0]
    sampler = PredictedFront(optuna.samplers.RandomSampler(), _cfg(tmp_path), 3, seed=0)
    data = predicted.Data(np.zeros((1, 3)), np.zeros((1, 2)), [], [], 4, seen=seen)
    off = sampler._near_optimism(data, rows, sampler._optimism())
    assert off.tolist() == [[predicted.OPTIMISM, 0.0]] * 3  # NEAR_SCALE 0: COST_OPTIMISM's (val_accuracy, time)
    monkeypatch.setattr(predicted, "NEAR_SCALE", 0.1)
    on = sampler._near_optimism(data, rows, sampler._optimism())
    assert on[:, 0].tolist() == [predicted.OPTIMISM] * 3  # quality keeps its optimism
    assert np.allclose(on[:, 1], predicted.OPTIMISM * predicted.NEAR_COST_OPTIMISM * share)
    monkeypatch.setattr(predicted, "NEAR_QUALITY", True)
    assert np.allclose(sampler._near_optimism(data, rows, sampler._optimism())[:, 0], predicted.OPTIMISM * share)


def test_a_costs_optimism_never_reaches_past_the_fronts_fastest_member(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # COST_FLOOR: a cost's optimistic point is floored at the completed front's best in it (or at the prediction,
    # where that is better); quality keeps its optimism
    sampler = PredictedFront(optuna.samplers.RandomSampler(), _cfg(tmp_path), 3, seed=0)
    front = [[-0.9, math.log(10.0)], [-0.8, math.log(2.0)]]  # minimized: -accuracy, log seconds
    data = predicted.Data(np.zeros((1, 3)), np.zeros((1, 2)), front, [{}, {}], 4)
    mean = np.array([[-0.75, math.log(2.2)], [-0.85, math.log(6.0)], [-0.7, math.log(1.0)]])
    hope = mean - np.array([[0.05, 0.5]] * 3)
    assert np.array_equal(sampler._floored(data, mean, hope), hope)  # off: unchanged
    monkeypatch.setattr(predicted, "COST_FLOOR", True)
    got = sampler._floored(data, mean, hope)
    assert got[:, 0].tolist() == hope[:, 0].tolist()  # accuracy's optimism kept
    assert got[0, 1] == pytest.approx(math.log(2.0))  # a near-copy of the fastest member: no faster than it
    assert got[1, 1] == pytest.approx(math.log(6.0) - 0.5)  # the front's middle: its optimism kept
    assert got[2, 1] == pytest.approx(math.log(1.0))  # predicted faster than the front: its prediction
    empty = predicted.Data(np.zeros((1, 3)), np.zeros((1, 2)), [], [], 4)
    assert np.array_equal(sampler._floored(empty, mean, hope), hope)  # no completed trial: nothing to floor at
    g = predicted.gains(front, sampler._floored(data, mean, hope)[[0]])
    assert g[0] == 0.0  # a copy of the fastest member adds nothing at the fast end


def test_every_accurate_every_th_choosing_trial_is_chosen_for_accuracy(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(predicted, "ACCURATE_EVERY", 2)
    cfg = _cfg(tmp_path)
    spy = Spy(optuna.samplers.TPESampler(seed=1, n_startup_trials=samplers.TPE_STARTUP_TRIALS), cfg, 6, seed=1)
    study = optuna.create_study(directions=cfg.directions, sampler=spy)
    study.optimize(_objective(cfg), n_trials=MIN_TRIALS + 12)
    choosing = [n for n in range(MIN_TRIALS, MIN_TRIALS + 12) if n % EXPLORE_EVERY != EXPLORE_EVERY - 1]
    assert EXPLORE_EVERY == 2 and MIN_TRIALS == 8
    assert spy.accurate == [10, 14, 18]  # of the choosing trials 8, 10, ..., 18: every second
    assert len(spy.seen) == len(choosing)


def test_an_owed_accurate_choice_is_made_at_the_next_choice_the_cap_allows(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # ACCURATE_OWED: one accurate choice per EXPLORE_EVERY x ACCURATE_EVERY trials of the whole study, made wherever
    # a choice runs; where choices are few (the cap binds), they go to the accurate end first
    from types import SimpleNamespace

    sampler = PredictedFront(optuna.samplers.RandomSampler(), _cfg(tmp_path), 3, seed=0)

    def at(n: int) -> bool:
        return sampler._accurate(SimpleNamespace(number=n))  # type: ignore[arg-type]

    assert EXPLORE_EVERY * predicted.ACCURATE_EVERY == 8
    assert [n for n in range(8, 40, 2) if at(n)] == [14, 22, 30, 38]  # off: every fourth choosing trial
    monkeypatch.setattr(predicted, "ACCURATE_OWED", True)
    sampler = PredictedFront(optuna.samplers.RandomSampler(), _cfg(tmp_path), 3, seed=0)
    assert not at(6)  # none owed before the 8th trial
    assert [at(n) for n in (20, 30, 31, 40, 41, 42)] == [True, True, True, True, True, False]  # 5 owed by trial 41


def test_no_choice_before_enough_trials_have_a_curve(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    spy = Spy(optuna.samplers.RandomSampler(seed=0), cfg, 4, seed=0)
    study = optuna.create_study(directions=cfg.directions, sampler=spy)
    study.optimize(lambda t: (space.sample(t, cfg), (0.5, 1.0))[1], n_trials=MIN_TRIALS + 3)  # no curves
    assert spy.seen == []
    assert study.trials[-1].state == TrialState.COMPLETE


def test_the_default_and_where_it_applies(tmp_path: Path) -> None:
    # auto by default: chosen among AUTO_K while worth its cost (test_auto_chooses_while_a_choice_costs_little...)
    assert _cfg(tmp_path).study.candidates == "auto" and n_candidates(_cfg(tmp_path)) == AUTO_K
    assert samplers.make_sampler(_cfg(tmp_path)).auto  # type: ignore[attr-defined]
    assert n_candidates(_cfg(tmp_path, {"candidates": 1})) == 1  # the sampler's own proposal, as before
    assert not isinstance(samplers.make_sampler(_cfg(tmp_path, {"candidates": 1})), PredictedFront)
    assert isinstance(samplers.make_sampler(_cfg(tmp_path, {"candidates": 8})), PredictedFront)
    assert n_candidates(_cfg(tmp_path, {"sampler": "random", "candidates": 4})) == 4
    one = _cfg(tmp_path, objectives=TWO[:1])
    assert n_candidates(one) == 1 and not isinstance(samplers.make_sampler(one), PredictedFront)


@pytest.mark.parametrize(("study", "objectives", "says"), [
    ({"candidates": 4}, TWO[:1], "needs two or more objectives"),
    ({"candidates": 4, "sampler": "nsga2"}, TWO, "nsga2 proposes whole points itself"),
    ({"candidates": 4, "strategy": "probe_then_tune"}, TWO, "candidates need the joint strategy"),
    ({"candidates": 0}, TWO, "must be auto or a whole number >= 1; got 0"),
    ({"candidates": "many"}, TWO, "must be auto or a whole number >= 1; got 'many'"),
])
def test_candidates_where_they_cannot_apply_is_one_clear_error(tmp_path: Path, study: dict[str, Any],
                                                                objectives: list[Any], says: str) -> None:
    with pytest.raises(ConfigError) as e:
        _cfg(tmp_path, study, objectives=objectives)
    assert "study.candidates" in str(e.value) and says in str(e.value)
    assert "\n" not in str(e.value)


def test_distributions_are_the_ones_the_space_suggests(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    d = PredictedFront(optuna.samplers.RandomSampler(), cfg, 2)._dists
    assert d["epochs"] == IntDistribution(2, 20)
    assert d["lr"] == FloatDistribution(1e-4, 1e-1, log=True)
    study = optuna.create_study(directions=cfg.directions)
    t = study.ask()
    space.sample(t, cfg)
    assert all(study.trials[0].distributions[k] == d[k] for k in study.trials[0].distributions)


def test_auto_chooses_while_a_choice_costs_little_beside_a_trial(tmp_path: Path) -> None:
    """`candidates: auto`: AUTO_K candidates where they apply, chosen while the strategy's measured CPU time stays
    within AUTO_SHARE of the trials' training time (their train_time_s), the inner sampler's proposal (or random
    ones) otherwise."""
    from autotune.search.predicted import AUTO_SHARE

    auto = _cfg(tmp_path, {"candidates": "auto"})
    assert n_candidates(auto) == AUTO_K and isinstance(samplers.make_sampler(auto), PredictedFront)
    assert n_candidates(_cfg(tmp_path, {"candidates": "auto"}, objectives=TWO[:1])) == 1  # cannot apply: 1, quietly
    assert n_candidates(_cfg(tmp_path, {"candidates": "auto", "sampler": "nsga2"})) == 1

    def run(train_time_s: float) -> Spy:
        spy = Spy(optuna.samplers.RandomSampler(seed=0), auto, AUTO_K, seed=0, auto=True)
        study = optuna.create_study(directions=auto.directions, sampler=spy)

        def objective(trial: optuna.Trial) -> tuple[float, float]:
            curve = _curve(space.sample(trial, auto))
            trial.set_user_attr(EPOCH_VALUES, curve)
            trial.set_user_attr("train_time_s", train_time_s)
            return curve[-1][0], curve[-1][1]

        study.optimize(objective, n_trials=MIN_TRIALS + 4)
        return spy

    long = run(3600.0)  # trials of an hour: every choice is worth its cost
    assert len(long.seen) == 4 - 4 // EXPLORE_EVERY and long.choice_s is not None
    assert long.choice_s <= AUTO_SHARE * 3600.0
    short = run(1e-6)  # trials shorter than any choice: a choice's price never fits in 5 % of them
    assert len(short.seen) == 0 and short.meter.used["choose"] == 0


def test_with_epochs_fixed_stopped_trials_curves_teach_the_prediction(tmp_path: Path) -> None:
    fixed = {k: v for k, v in SPACE.items() if k != "epochs"}
    cfg = _cfg(tmp_path, space=fixed, train={"epochs": 12})
    study = optuna.create_study(directions=cfg.directions)
    rng = random.Random(0)
    for i in range(12):
        p = {"lr": 10 ** rng.uniform(-4, -1), "optimizer": "adam", "batch_size": rng.choice([32, 128, 512]),
             "model.channels": '[8, 16]'}
        curve = _curve({**p, "epochs": 12})
        dists = {k: distribution(cfg.space[k]) for k in p}
        if i % 3:  # two in three stopped after 3 epochs
            study.add_trial(create_trial(params=p, distributions=dists, state=TrialState.PRUNED,
                                         user_attrs={EPOCH_VALUES: curve[:3]}))
        else:
            study.add_trial(create_trial(params=p, distributions=dists, values=curve[-1],
                                         user_attrs={EPOCH_VALUES: curve}))
    sampler = PredictedFront(optuna.samplers.RandomSampler(), cfg, 3, seed=0)
    data = sampler._data(study)
    assert data is not None
    assert 1 <= len(data.front) <= 4 and data.trials == 12  # the completed trials' front; every trial with a curve
    assert len(data.x) == 4 * len({1, 2, 3, 4, 6, 8, 12}) + 8 * 3  # every kept epoch of every trial, stopped ones too
    assert data.x[:, -1].max() == pytest.approx(math.log(12)) and data.x[:, -1].min() == 0.0  # log of epochs done


def test_a_choice_reads_the_studys_trials_once(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    study = optuna.create_study(directions=cfg.directions, sampler=PredictedFront(
        optuna.samplers.TPESampler(seed=0, n_startup_trials=2), cfg, 6, seed=0))
    study.optimize(_objective(cfg), n_trials=MIN_TRIALS)
    reads = 0
    storage_get = study._storage.get_all_trials

    def counting(*a: Any, **k: Any) -> Any:
        nonlocal reads
        reads += 1
        return storage_get(*a, **k)

    study._storage.get_all_trials = counting  # type: ignore[method-assign]
    study.optimize(_objective(cfg), n_trials=EXPLORE_EVERY)  # a chosen trial, and one the inner sampler proposes
    # each trial's parameters (every candidate's and every parameter TPE proposes) from one snapshot; the rest is
    # Optuna's own bookkeeping
    assert reads < 5 * EXPLORE_EVERY


def test_the_pool_holds_the_inner_proposal_points_near_the_front_and_uniform_points(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    sampler = PredictedFront(optuna.samplers.RandomSampler(seed=0), cfg, 41, seed=0)
    study = optuna.create_study(directions=cfg.directions)
    trial = study.ask()
    parent = {"epochs": 10, "lr": 1e-2, "optimizer": "sgd", "momentum": 0.5, "batch_size": 128,
              "model.channels": '[8, 16]'}
    pool = sampler._pool(study, study._storage.get_trial(trial._trial_id), [parent])
    assert len(pool) == 41
    near = pool[1:1 + round(predicted.LOCAL_SHARE * 40)]
    far = pool[1 + len(near):]
    for c in pool:  # whole points of the space, each `when` holding, list choices as the space stores them
        assert ("momentum" in c) == (c["optimizer"] == "sgd")
        assert c["model.channels"] in ('[8, 16]', '[16, 32]') and c["batch_size"] in (32, 128, 512)
        assert 2 <= c["epochs"] <= 20 and isinstance(c["epochs"], int) and 1e-4 <= c["lr"] <= 1e-1
    # near the front's member: within a few steps of its log learning rate (its range: 3 decades)
    assert all(abs(math.log10(c["lr"]) + 2) < 3 * 4 * predicted.LOCAL_STEP for c in near)
    assert sum(c["optimizer"] == "sgd" for c in near) > len(near) / 2  # a categorical mostly kept
    lrs = sorted(math.log10(c["lr"]) for c in far)  # uniform over the log range
    assert lrs[0] < -3.2 and lrs[-1] > -1.8


def test_a_drawn_value_stays_on_its_parameters_grid() -> None:
    rng = __import__("numpy").random.default_rng(0)
    ints = [draw(IntDistribution(1, 5), rng) for _ in range(300)]
    assert set(ints) == {1, 2, 3, 4, 5}  # every integer, the ends included
    stepped = [draw(FloatDistribution(0.0, 1.0, step=0.25), rng, near=0.5) for _ in range(100)]
    assert set(stepped) <= {0.0, 0.25, 0.5, 0.75, 1.0}
    logs = [draw(IntDistribution(16, 512, log=True), rng) for _ in range(300)]
    assert min(logs) >= 16 and max(logs) <= 512 and sum(v < 64 for v in logs) > 50  # log-uniform: a third below 64


def test_a_clock_is_extrapolated_to_corners_no_trial_reached() -> None:
    """Time per epoch halves as the batch (one feature, 0 to 1) doubles; trials saw batches up to the middle of the
    range. The model's clock follows the law to the largest batch, below every time it saw; a forest alone would
    stop at the fastest trial it saw."""
    np_ = __import__("numpy")
    rng = np_.random.default_rng(0)
    batch = rng.uniform(0.0, 0.5, 60)
    epochs = rng.integers(1, 20, 60).astype(float)
    log_time = -3.0 * batch + np_.log(epochs) + rng.normal(0, 0.01, 60)
    acc = 0.9 - 0.1 * batch
    x = np_.column_stack([batch, np_.log(epochs)])
    model = Model(x, np_.column_stack([-acc, log_time]), clocks=[False, True], seed=0)
    mean, spread = model.predict(np_.array([[1.0, math.log(10)]]))
    assert mean[0, 1] == pytest.approx(-3.0 + math.log(10), abs=0.1)
    assert mean[0, 1] < (log_time - np_.log(epochs)).min() + math.log(10) - 1.0  # faster than any trial seen, at 10
    assert spread.shape == (1, 2) and (spread >= 0).all()


def test_the_model_is_refit_every_trial_then_only_once_the_trials_have_grown(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(predicted, "REFIT_GROWTH", 0.5)
    monkeypatch.setattr(predicted, "REFIT_ALL", 10)
    cfg = _cfg(tmp_path)
    sampler = PredictedFront(optuna.samplers.RandomSampler(seed=0), cfg, 4, seed=0)
    np_ = __import__("numpy")
    data = predicted.Data(np_.random.default_rng(0).random((40, 13)), np_.random.default_rng(1).random((40, 2)),
                          [[0.0, 0.0]], [], 8)
    models = [sampler._fit(predicted.Data(data.x, data.y, data.front, [], n)) for n in (8, 8, 9, 10)]
    assert models[1] is models[0] and models[2] is not models[1] and models[3] is not models[2]  # below 10: each
    first = models[3]
    assert sampler._fit(predicted.Data(data.x, data.y, data.front, [], 14)) is first  # 14 < 1.5 x 10
    assert sampler._fit(predicted.Data(data.x, data.y, data.front, [], 15)) is not first


def _spread_study(cfg: config.RunConfig, n: int = 40) -> optuna.Study:
    study = optuna.create_study(directions=cfg.directions)
    rng = random.Random(0)
    for _ in range(n):  # trials spread over the space, each with its curve
        p = {"epochs": rng.randint(2, 20), "lr": 10 ** rng.uniform(-4, -1), "optimizer": rng.choice(["sgd", "adam"]),
             "batch_size": rng.choice([32, 128, 512]), "model.channels": rng.choice(['[8, 16]', '[16, 32]'])}
        if p["optimizer"] == "sgd":
            p["momentum"] = 0.5
        curve = _curve(p)
        study.add_trial(create_trial(params=p, distributions={k: distribution(cfg.space[k]) for k in p},
                                     values=curve[-1], user_attrs={EPOCH_VALUES: curve}))
    return study


def test_of_two_candidates_with_equal_predicted_gain_the_cheaper_is_proposed(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(predicted, "COST_WEIGHT", 1.0)  # (built, off by default: see predicted.py)
    cfg = _cfg(tmp_path, {"n_trials": 1000})  # (a budget 4 % spent: the cost still counts fully)
    sampler = PredictedFront(optuna.samplers.RandomSampler(), cfg, 2, seed=0)
    data = sampler._data(_spread_study(cfg))
    assert data is not None and data.ready
    good = {"epochs": 12, "lr": 1e-2, "optimizer": "adam", "batch_size": 512, "model.channels": '[8, 16]'}
    slow = {**good, "batch_size": 32}  # 16x the time per epoch
    monkeypatch.setattr(predicted, "gains", lambda front, points: np.full(len(points), 0.5))  # equal gains
    assert sampler._choose(data, [slow, good]) == 1
    assert sampler._choose(data, [good, slow]) == 0


def test_start_up_trials_are_the_cheaper_draws_not_full_cost_random_ones(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(predicted, "START_POOL", 8)  # (built, off by default: see predicted.py)
    monkeypatch.setattr(predicted, "MIN_TRIALS", 8)  # a start-up long enough to compare its trials' times
    cfg = _cfg(tmp_path)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        curve = _curve(space.sample(trial, cfg))
        trial.set_user_attr(EPOCH_VALUES, curve)
        trial.set_user_attr("train_time_s", 60.0 * curve[-1][1])  # trials of minutes: the strategy's cost is small
        return curve[-1][0], curve[-1][1]

    def start_up_time(sampler: optuna.samplers.BaseSampler) -> float:
        study = optuna.create_study(directions=cfg.directions, sampler=sampler)
        study.optimize(objective, n_trials=predicted.MIN_TRIALS)
        return sum(t.values[1] for t in study.trials[2:])  # from the third trial on, two clocks are known

    cheap = [start_up_time(PredictedFront(optuna.samplers.RandomSampler(seed=s), cfg, AUTO_K, seed=s, auto=True))
             for s in range(4)]
    full = [start_up_time(optuna.samplers.RandomSampler(seed=s)) for s in range(4)]
    assert all(c < f for c, f in zip(cheap, full)) and sum(cheap) < 0.6 * sum(full), (cheap, full)


def test_a_running_trial_is_in_the_front_a_choice_measures_against(tmp_path: Path) -> None:
    """Several workers: a trial still running counts at its predicted values, so the next choice goes elsewhere."""
    cfg = _cfg(tmp_path)
    study = _spread_study(cfg)
    sampler = PredictedFront(optuna.samplers.RandomSampler(), cfg, 2, seed=0)
    good = {"epochs": 12, "lr": 1e-2, "optimizer": "adam", "batch_size": 512, "model.channels": '[8, 16]'}
    near = dict(good)  # what another worker is running now
    cands = [{**good, "epochs": 3, "batch_size": 128}, near]  # one that adds nothing, one near `good`
    data = sampler._data(study)
    assert data is not None and not data.pending and sampler._choose(data, cands) == 1
    study.add_trial(create_trial(state=TrialState.RUNNING, params=good,
                                 distributions={k: distribution(cfg.space[k]) for k in good}))
    data = sampler._data(study)
    assert data is not None and data.pending == (good,)
    assert sampler._choose(data, cands) == 0  # `near` adds nothing beside the running `good`: the inner proposal


class Metered(PredictedFront):
    """The sampler's every call timed from outside (thread CPU seconds), whatever it reports of itself."""

    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        self.outside_s = 0.0

    def _timed(self, f: Any, *a: Any) -> Any:
        t0 = time.thread_time()
        try:
            return f(*a)
        finally:
            self.outside_s += time.thread_time() - t0

    def infer_relative_search_space(self, *a: Any) -> Any:
        return self._timed(super().infer_relative_search_space, *a)

    def sample_relative(self, *a: Any) -> Any:
        return self._timed(super().sample_relative, *a)

    def sample_independent(self, *a: Any) -> Any:
        return self._timed(super().sample_independent, *a)

    def before_trial(self, *a: Any) -> Any:
        return self._timed(super().before_trial, *a)

    def after_trial(self, *a: Any) -> Any:
        return self._timed(super().after_trial, *a)


def test_the_strategys_cpu_share_stays_under_its_cap_on_sub_second_trials(tmp_path: Path) -> None:
    """`candidates: auto` on a stream of 30 ms trials (TPE inside, as `make_sampler` builds it): the sampler's own CPU
    time, measured from outside, stays within CAP_SHARE of the trials' time; it falls back to cheaper modes."""
    from autotune.search.cost import CAP_SHARE

    cfg = _cfg(tmp_path, {"candidates": "auto", "n_trials": 80})
    inner = optuna.samplers.TPESampler(seed=0, n_startup_trials=samplers.TPE_STARTUP_TRIALS)
    sampler = Metered(inner, cfg, AUTO_K, seed=0, auto=True)
    study = optuna.create_study(directions=cfg.directions, sampler=sampler)
    trial_s = 0.0

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        nonlocal trial_s
        t0 = time.perf_counter()
        curve = _curve(space.sample(trial, cfg))
        time.sleep(0.03)  # the training
        trial.set_user_attr(EPOCH_VALUES, curve)
        took = time.perf_counter() - t0
        trial.set_user_attr("train_time_s", took)
        trial_s += took
        return curve[-1][0], took

    study.optimize(objective, n_trials=80)
    assert sampler.outside_s <= CAP_SHARE * trial_s, (sampler.outside_s, trial_s, sampler.meter.used)
    assert sampler.meter.used["random"] > 0  # the cap bound: cheaper modes ran


def test_the_cap_counts_a_real_runs_trial_times_from_their_records(tmp_path: Path) -> None:
    """In a real run a trial's records are written after Optuna's after_trial: the meter reads each trial's
    train_time_s from the study at the next proposal, not the sampler's view at after_trial (where it is missing)."""
    import autotune
    from autotune.spec import TrialRecord
    from tests.support import tiny

    cfg = tiny(tmp_path, study={"n_trials": 4}, space={"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}},
               pruning={"pruner": "none"})
    res = autotune.run(cfg)
    sampler = res.study.sampler
    assert isinstance(sampler, PredictedFront)
    times = [TrialRecord.of(t).metric("train_time_s") for t in res.study.trials]
    assert None not in times
    assert sampler.meter.trial_s == pytest.approx(sum(times[:-1]), rel=1e-6)  # the last: no proposal after it
