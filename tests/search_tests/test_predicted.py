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
    assert n_candidates(_cfg(tmp_path)) == 1  # off by default: its cost beats its gain on short trials
    assert not isinstance(samplers.make_sampler(_cfg(tmp_path)), PredictedFront)
    assert isinstance(samplers.make_sampler(_cfg(tmp_path, {"candidates": 8})), PredictedFront)
    assert n_candidates(_cfg(tmp_path, {"sampler": "random", "candidates": 4})) == 4
    one = _cfg(tmp_path, objectives=TWO[:1])
    assert n_candidates(one) == 1 and not isinstance(samplers.make_sampler(one), PredictedFront)


@pytest.mark.parametrize(("study", "objectives", "says"), [
    ({"candidates": 4}, TWO[:1], "needs two or more objectives"),
    ({"candidates": 4, "sampler": "nsga2"}, TWO, "nsga2 proposes whole points itself"),
    ({"candidates": 4, "strategy": "probe_then_tune"}, TWO, "candidates need the joint strategy"),
    ({"candidates": 0}, TWO, "greater than or equal to 1"),
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
