"""The predicted front (search/predicted.py): K proposals per trial, the one predicted to add most to the front runs;
its proposals are whole points of the space, what it predicts is learned from the trials' curves, and the config
says where it applies."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from autotune import config
from autotune.core.errors import ConfigError
from autotune.search import EPOCH_VALUES, samplers, space
from autotune.search.predicted import MIN_TRIALS, PredictedFront, n_candidates
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

    def _choose(self, data: Any, cands: list[dict[str, Any]]) -> int:
        i = super()._choose(data, cands)
        self.seen.append((cands, i))
        return i


def test_after_its_start_every_trial_runs_the_chosen_whole_candidate(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    inner = optuna.samplers.TPESampler(seed=1, n_startup_trials=samplers.TPE_STARTUP_TRIALS)
    spy = Spy(inner, cfg, 6, seed=1)
    study = optuna.create_study(directions=cfg.directions, sampler=spy)
    study.optimize(_objective(cfg), n_trials=MIN_TRIALS + 6)
    assert len(spy.seen) == 6  # one choice per trial after the first MIN_TRIALS with a curve
    for t, (cands, i) in zip(study.trials[MIN_TRIALS:], spy.seen):
        assert len(cands) == 6
        assert t.params == cands[i]  # every parameter of the trial is the chosen candidate's
        assert ("momentum" in t.params) == (t.params["optimizer"] == "sgd")  # a `when` holds in a candidate too
        assert t.params["model.channels"] in ('[8, 16]', '[16, 32]')  # list choices as the space stores them


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


def test_no_choice_before_enough_trials_have_a_curve(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    spy = Spy(optuna.samplers.RandomSampler(seed=0), cfg, 4, seed=0)
    study = optuna.create_study(directions=cfg.directions, sampler=spy)
    study.optimize(lambda t: (space.sample(t, cfg), (0.5, 1.0))[1], n_trials=MIN_TRIALS + 3)  # no curves
    assert spy.seen == []
    assert study.trials[-1].state == TrialState.COMPLETE


def test_the_default_and_where_it_applies(tmp_path: Path) -> None:
    # auto by default: chosen among 8 while worth its cost (test_auto_chooses_while_a_choice_costs_little...)
    assert _cfg(tmp_path).study.candidates == "auto" and n_candidates(_cfg(tmp_path)) == 8
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
    """`candidates: auto`: 8 candidates where they apply, chosen while one choice's measured CPU time is at most
    AUTO_SHARE of the median trial's training time (the trials' train_time_s), the inner sampler's proposal after."""
    from autotune.search.predicted import AUTO_K, AUTO_SHARE

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
    assert len(long.seen) == 4 and long.choice_s is not None and long.choice_s <= AUTO_SHARE * 3600.0
    short = run(1e-6)  # trials shorter than any choice: measured once, then never again
    assert len(short.seen) == 1


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
    x, y, front = data
    assert len(front) == 4  # the completed trials' values make the front
    assert len(x) == 4 * len({1, 2, 3, 4, 6, 8, 12}) + 8 * 3  # every kept epoch of every trial, stopped ones too
    assert x[:, -1].max() == 1.0 and x[:, -1].min() == pytest.approx(1 / 12)  # the share of the 12-epoch run done


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
    study.optimize(_objective(cfg), n_trials=1)
    # 6 candidates x 6 parameters proposed by TPE from one snapshot; the rest is Optuna's own bookkeeping
    assert reads < 10
