"""search/credit.py: a trial stopped after epoch k is shown to the sampler as the completed trial with epochs: k,
where that is true, and nowhere else; the study itself keeps its stored trials."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from autotune import config
from autotune.search import EPOCH_VALUES, samplers
from autotune.search.credit import StoppedAsShorter, as_shorter, length_free
from autotune.search.predicted import PredictedFront
from autotune.spec import Settings

DISTS = {"epochs": IntDistribution(2, 30), "lr": FloatDistribution(1e-4, 1e-1, log=True),
         "lr_schedule": CategoricalDistribution(["constant", "cosine"])}


def _stopped(curve: list[list[float]], schedule: str = "constant", epochs: int = 30) -> FrozenTrial:
    return create_trial(state=TrialState.PRUNED, params={"epochs": epochs, "lr": 0.01, "lr_schedule": schedule},
                        distributions=DISTS, user_attrs={EPOCH_VALUES: curve})


def _settings(params: dict[str, Any]) -> dict[str, Any]:
    return dict(params)


def test_a_stopped_constant_lr_trial_is_the_completed_trial_with_its_epochs() -> None:
    t = _stopped([[0.5, 1.0], [0.7, 2.0], [0.8, 3.1]])
    c = as_shorter(t, _settings)
    assert c is not None
    assert c.state == TrialState.COMPLETE
    assert c.values == [0.8, 3.1]  # the values recorded after its last epoch
    assert c.params == {**t.params, "epochs": 3}
    assert c.number == t.number and c._trial_id == t._trial_id


@pytest.mark.parametrize("why, trial", [
    ("a cosine schedule depends on the run's length", _stopped([[0.5, 1.0], [0.7, 2.0], [0.8, 3.1]], "cosine")),
    ("epoch 1 is below the searched range (2-30)", _stopped([[0.5, 1.0]])),
    ("a non-finite value", _stopped([[0.5, 1.0], [float("nan"), 2.0]])),
    ("no recorded curve", _stopped([])),
])
def test_where_it_is_not_true_the_stopped_trial_stays_as_stored(why: str, trial: FrozenTrial) -> None:
    assert as_shorter(trial, _settings) is None, why


def test_a_completed_trial_is_left_alone() -> None:
    t = create_trial(state=TrialState.COMPLETE, values=[0.9, 5.0], params={"epochs": 5, "lr": 0.01,
                     "lr_schedule": "constant"}, distributions=DISTS, user_attrs={EPOCH_VALUES: [[0.9, 5.0]]})
    assert as_shorter(t, _settings) is None


def test_compression_after_training_is_not_length_free() -> None:
    assert length_free(Settings({"lr_schedule": "constant"}))
    assert not length_free(Settings({"prune_method": "l1_unstructured"}))
    assert not length_free(Settings({"quantize": "dynamic_int8"}))
    assert not length_free(Settings({"finetune_epochs": 2}))


class _Spy(optuna.samplers.RandomSampler):
    """Records what the study looked like to it when it sampled."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.seen: list[list[tuple[TrialState, dict[str, Any], Any]]] = []

    def sample_independent(self, study: Any, trial: FrozenTrial, name: str, dist: Any) -> Any:
        self.seen.append([(t.state, t.params, t.values) for t in study._get_trials(deepcopy=False)])
        return super().sample_independent(study, trial, name, dist)


def test_the_sampler_sees_the_shorter_trial_and_the_study_keeps_the_stored_one() -> None:
    spy = _Spy()
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=StoppedAsShorter(spy, _settings))
    study.add_trial(_stopped([[0.5, 1.0], [0.7, 2.0], [0.8, 3.1]]))
    study.add_trial(_stopped([[0.5, 1.0], [0.7, 2.0]], "cosine"))
    study.ask({"lr": DISTS["lr"]})
    shown = spy.seen[-1]
    assert shown[0] == (TrialState.COMPLETE, {"epochs": 3, "lr": 0.01, "lr_schedule": "constant"}, [0.8, 3.1])
    assert shown[1][0] == TrialState.PRUNED  # the cosine one: as stored
    stored = study.get_trials(deepcopy=False)
    assert [t.state for t in stored[:2]] == [TrialState.PRUNED, TrialState.PRUNED]
    assert stored[0].params["epochs"] == 30
    assert study.best_trials == []  # nothing the sampler was shown reaches the front


def _cfg(tmp_path: Any, **over: Any) -> Any:
    raw: dict[str, Any] = {
        "study": {"name": "c", "storage": f"sqlite:///{tmp_path}/c.db", "n_trials": 2},
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"},
                       {"metric": "train_time_s", "direction": "minimize"}],
        "space": {"epochs": {"type": "int", "low": 2, "high": 8}, "lr": {"type": "float", "low": 1e-4,
                                                                        "high": 1e-1, "log": True}},
        "pruning": {"pruner": "pareto_asha", "stopped_as_shorter": True},
    }
    for k, v in over.items():
        raw[k] = v
    return config.from_dict(raw, source=str(tmp_path / "c.yaml"))


def test_make_sampler_wraps_only_where_it_can_be_true(tmp_path: Any) -> None:
    def made(cfg: Any) -> Any:  # under the predicted front's chooser (study.candidates: auto, the default)
        s = samplers.make_sampler(cfg)
        return s.inner if isinstance(s, PredictedFront) else s

    assert isinstance(made(_cfg(tmp_path)), StoppedAsShorter)
    no_epochs = _cfg(tmp_path, space={"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}})
    assert not isinstance(made(no_epochs), StoppedAsShorter)
    one = _cfg(tmp_path, objectives=[{"metric": "val_accuracy", "direction": "maximize"}],
               pruning={"pruner": "median", "stopped_as_shorter": True})
    assert not isinstance(made(one), StoppedAsShorter)
    off = _cfg(tmp_path, pruning={"pruner": "pareto_asha", "stopped_as_shorter": False})
    assert not isinstance(made(off), StoppedAsShorter)
