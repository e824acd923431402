"""Warm starts: a new study's first trials are an earlier study's best configurations that fit its space."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune import config
from autotune.core.errors import ConfigError
from autotune.study import runner as study_mod
from autotune.study import warm

SPACE = {"lr": {"type": "float", "low": 1e-3, "high": 3e-1, "log": True},
         "optimizer": {"type": "categorical", "choices": ["sgd", "adam"]},
         "batch_size": {"type": "categorical", "choices": [32, 64]}}


def cfg_for(tmp_path: Path, name: str, n_trials: int, space: dict[str, Any] | None = None,
            **study: Any) -> config.RunConfig:
    return config.from_dict({
        "study": {"name": name, "storage": f"sqlite:///{tmp_path}/{name}.db", "n_trials": n_trials, "seed": 0,
                  "sampler": "random", **study},
        "trainer": "tests.user_fits:fit", "train": {"epochs": 2, "device": "cpu"}, "space": space or SPACE,
        "pruning": {"pruner": "none"}}, source=str(tmp_path / f"{name}.yaml"))


@pytest.fixture
def earlier(tmp_path: Path) -> Any:
    return study_mod.run(cfg_for(tmp_path, "old", 6))


def test_first_trials_are_the_earlier_studys_best(tmp_path: Path, earlier: Any,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    top = warm.best(earlier, 3)
    assert len(top) == 3
    ws = {"storage": f"sqlite:///{tmp_path}/old.db", "study": "old", "top_k": 3}
    res = study_mod.run(cfg_for(tmp_path, "new", 5, warm_start=ws))
    trials = res.trials
    assert [t.params for t in trials[:3]] == [t.params for t in top]
    assert [t.user_attrs[warm.ATTR] for t in trials[:3]] == [f"old#{t.number}" for t in top]
    assert warm.ATTR not in trials[3].user_attrs  # then the sampler's own
    assert "warm start: 3 of old's 3 best trial(s) queued first" in capsys.readouterr().err
    # best: Pareto rank first (accuracy up, training time down), then accuracy
    front = {t.number for t in earlier.best_trials}
    assert top[0].number in front
    # resumed: nothing is queued again
    study_mod.run(cfg_for(tmp_path, "new", 6, warm_start=ws))
    assert sum(1 for t in res.trials if warm.ATTR in t.user_attrs) == 3


def test_the_whole_queue_in_order_from_a_study_built_by_hand(tmp_path: Path) -> None:
    """Fixed values (accuracy up, time down), so the order is known by construction: feasible trials first, by
    Pareto rank, then accuracy; an infeasible trial (a violated constraint) last, however good its values;
    failed and pruned trials never."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.trial import TrialState, create_trial

    url = f"sqlite:///{tmp_path}/hand.db"
    src = optuna.create_study(study_name="hand", storage=url, directions=["maximize", "minimize"])
    dist = {"lr": FloatDistribution(1e-3, 3e-1, log=True), "optimizer": CategoricalDistribution(["sgd", "adam"]),
            "batch_size": CategoricalDistribution([32, 64])}

    def add(values: list[float] | None, lr: float, opt: str, bs: int, state: TrialState = TrialState.COMPLETE,
            **kw: Any) -> dict[str, Any]:
        params = {"lr": lr, "optimizer": opt, "batch_size": bs}
        src.add_trial(create_trial(state=state, values=values, params=params, distributions=dist, **kw))
        return params

    p0 = add([0.90, 2.0], 0.01, "sgd", 32)  # rank 0
    p1 = add([0.80, 1.0], 0.02, "adam", 64)  # rank 0, less accurate than #0
    p2 = add([0.85, 3.0], 0.03, "adam", 32)  # rank 1 (dominated by #0)
    p3 = add([0.99, 0.5], 0.04, "sgd", 64, constraints={"accuracy_drop": 0.1})  # dominates all, infeasible
    p4 = add([0.70, 4.0], 0.05, "sgd", 32)  # rank 2
    add(None, 0.06, "adam", 64, state=TrialState.FAIL)  # 5: never queued
    add(None, 0.07, "adam", 32, state=TrialState.PRUNED)  # 6: never queued
    want = [(0, p0), (1, p1), (2, p2), (4, p4), (3, p3)]
    res = study_mod.run(cfg_for(tmp_path, "new", 6, warm_start={"storage": url, "study": "hand", "top_k": 10}))
    trials = res.trials
    assert [(t.user_attrs.get(warm.ATTR), t.params) for t in trials[:5]] == [(f"hand#{n}", p) for n, p in want]
    assert warm.ATTR not in trials[5].user_attrs  # then the sampler's own
    assert res.user_attrs[warm.ATTR] == {"study": "hand", "trials": [0, 1, 2, 4, 3], "notes": []}
    assert all(t.state == TrialState.COMPLETE for t in trials)


def test_configurations_that_no_longer_fit_are_skipped_with_a_note(tmp_path: Path, earlier: Any,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    top = warm.best(earlier, 6)
    keep = {t.number for t in top if t.params["optimizer"] == "adam"}
    space = {"lr": SPACE["lr"], "optimizer": {"type": "categorical", "choices": ["adam", "adamw"]}}
    res = study_mod.run(cfg_for(tmp_path, "new", len(keep) + 1, space=space,
                                warm_start={"storage": f"sqlite:///{tmp_path}/old.db", "study": "old", "top_k": 6}))
    queued = [t for t in res.trials if warm.ATTR in t.user_attrs]
    assert {int(t.user_attrs[warm.ATTR].split("#")[1]) for t in queued} == keep
    assert all("batch_size" not in t.params for t in queued)  # not searched here: the config's value
    err = capsys.readouterr().err
    assert "skipped: optimizer 'sgd' is outside space.optimizer" in err
    assert "batch_size not searched here" in err


def test_a_missing_earlier_study_is_one_error_before_anything_is_written(tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, "new", 2, warm_start={"storage": f"sqlite:///{tmp_path}/none.db", "study": "nope"})
    with pytest.raises(ConfigError, match=r"study\.warm_start\.storage: no study 'nope': .*none\.db does not exist"):
        study_mod.run(cfg)
    assert not (tmp_path / "none.db").exists()  # the earlier study's mistyped file is made by nothing
    import optuna

    assert optuna.get_all_study_summaries(f"sqlite:///{tmp_path}/new.db") == []
    with pytest.raises(ConfigError, match=r"study\.warm_start\.top_k: .*greater than or equal to 1"):
        cfg_for(tmp_path, "new", 2, warm_start={"study": "x", "top_k": 0})
