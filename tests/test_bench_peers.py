"""The replay's peers as their authors run them (bench/replay_syne.py, bench/replay_arms.py): MOASHA pays no
simulator latency, the rank-corrected rung decision keeps a trial that dominates its rung, and the OptunaHub
multi_metric_pruner rule prunes as its published source (MedianPruner over Pareto-rank rewards) does."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState, create_trial

from bench import replay, replay_syne
from bench.replay_arms import MM_KEY, OptunaHubRule, hv_order, step_rewards
from bench.replay_workload import Curve

pytestmark = pytest.mark.filterwarnings("ignore")
pytest.importorskip("syne_tune")


@dataclass
class OneSecondEpochs:
    """A workload whose every configuration trains 3 epochs of exactly 1 s (accuracy from x)."""

    space: dict[str, dict[str, Any]] = field(default_factory=lambda: {"x": {"type": "float", "low": 0.0, "high": 1.0}})
    max_epochs: int = 3

    @property
    def keys(self) -> list[str]:
        return ["x"]

    def nearest(self, params: dict[str, Any]) -> Curve:
        x = float(params["x"])
        return Curve({"x": x}, [{"val_accuracy": x * e / 3, "train_time_s": float(e), "end_s": float(e),
                                 "samples_per_s": 1.0} for e in (1, 2, 3)], setup_s=0.0)


@pytest.mark.parametrize("corrected", [False, True])
def test_moasha_pays_no_simulator_latency(corrected: bool) -> None:
    cfg = replay.runner("plain Optuna", replay.SPACES["lcbench"])[1]  # no epochs searched: stopped ones never count
    ev = replay_syne.run_moasha(cfg, OneSecondEpochs(), seed=0, budget=20.0, workers=1, charge_cpu=False,
                                corrected=corrected)
    assert ev, "no trial ended"
    # every event is at a whole second: each epoch costs exactly its 1 s, and nothing else does (Syne Tune's
    # default simulator adds 0.05 s per start, result, stop and completion, 2 ms per stop, and polls every 0.05 s)
    assert all(abs(at - round(at)) < 1e-6 for at, *_ in ev)
    done = [e for e in ev if e[3] == "COMPLETE"]
    assert done and done[0][0] == pytest.approx(sum(1 for e in ev if e[0] <= done[0][0] and e[3] == "PRUNED")
                                                 + 3.0)  # each stopped trial cost its one epoch, then 3 epochs


def decide(corrected: bool, rung: list[tuple[float, float]], new: tuple[float, float]) -> str:
    """MOASHA's decision on a trial reaching its first rung (epoch 1) with `new` (error, time), after `rung`."""
    from syne_tune.config_space import uniform

    space = {"x": uniform(0, 1), "epochs": 9}
    bracket = replay_syne.make_moasha(space, max_t=9, seed=0, corrected=corrected).brackets[0]
    for i, (err, t) in enumerate(rung):
        bracket.on_result(trial_id=i, cur_iter=1, metrics={"error": err, "train_time_s": t})
    return bracket.on_result(trial_id=99, cur_iter=1, metrics={"error": new[0], "train_time_s": new[1]})


def test_the_rank_corrected_rung_keeps_a_trial_that_dominates_its_rung() -> None:
    rung = [(0.5, 5.0), (0.4, 6.0), (0.6, 4.0), (0.45, 5.5), (0.9, 9.0)]  # the last trial: dominated by all
    best = (0.1, 1.0)  # dominates every trial at the rung
    assert decide(True, rung, best) == "CONTINUE"
    assert decide(True, rung, (0.95, 9.5)) == "STOP"  # dominated by all: stopped
    # as shipped, the decision reads the index of the trial sorted last (here the dominated trial 4) as the new
    # trial's rank: 4 / 6 > 1/3, so the trial that dominates its whole rung is stopped
    assert decide(False, rung, best) == "STOP"


def test_the_optunahub_rule_on_a_hand_made_study() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    rule = OptunaHubRule({"val_accuracy": "maximize", "train_time_s": "minimize"})

    def finished(per_step: list[tuple[float, float]]) -> None:
        t = study.ask()
        t.set_user_attr(MM_KEY, {str(s): {"val_accuracy": a, "train_time_s": tt}
                                 for s, (a, tt) in enumerate(per_step, 1)})
        study.tell(t, list(per_step[-1]))

    def running(per_step: list[tuple[float, float]]) -> int:
        t = study.ask()
        t.set_user_attr(MM_KEY, {str(s): {"val_accuracy": a, "train_time_s": tt}
                                 for s, (a, tt) in enumerate(per_step, 1)})
        return t.number

    for acc in (0.9, 0.8, 0.7, 0.6):  # one Pareto rank each at both steps (equal times)
        finished([(acc - 0.1, 1.0), (acc, 2.0)])
    bad = running([(0.3, 1.0), (0.35, 2.0)])
    assert not rule.prune(study, bad)  # 4 finished trials: MedianPruner's start-up (5) holds
    finished([(0.4, 1.0), (0.5, 2.0)])
    assert rule.prune(study, bad)  # dominated by every finished trial at both steps: below the median rank
    # on the front at step 1, dominated at step 2: its best value over the steps (-1) keeps it
    early = running([(0.95, 1.0), (0.55, 2.0)])
    assert not rule.prune(study, early)
    good = running([(0.85, 0.5), (0.95, 1.0)])
    assert not rule.prune(study, good)


def literal(study: optuna.Study, number: int, rule: OptunaHubRule) -> bool:
    """OptunaHub's own procedure: a synthetic single-objective study of the finished trials' rewards per step,
    judged by Optuna's MedianPruner()."""
    trials = study.get_trials(deepcopy=False)
    me = next(t for t in trials if t.number == number)
    others = [t for t in trials if t.number != number]
    mine = rule.extract(me.user_attrs.get(MM_KEY, {}))
    theirs = [rule.extract(t.user_attrs.get(MM_KEY, {})) for t in others]
    current: dict[int, float] = {}
    ranks: list[dict[int, float]] = [{} for _ in others]
    for step in mine:
        now, at = rule.rewards_at(step, mine, theirs)
        current[step] = now
        for i, r in at.items():
            ranks[i][step] = r
    synthetic = optuna.create_study(direction="minimize")
    for t, r in zip(others, ranks):
        if t.state.is_finished() and r:
            synthetic.add_trial(create_trial(state=TrialState.COMPLETE, value=0.0, intermediate_values=r))
    judged = create_trial(state=TrialState.RUNNING, intermediate_values=current)
    return optuna.pruners.MedianPruner().prune(synthetic, judged)


def test_the_optunahub_rule_matches_median_pruner_on_its_synthetic_study() -> None:
    rng = random.Random(0)
    rule = OptunaHubRule({"val_accuracy": "maximize", "train_time_s": "minimize"})
    checked = pruned = 0
    for _ in range(12):
        study = optuna.create_study(directions=["maximize", "minimize"])
        for _ in range(rng.randint(3, 14)):
            t = study.ask()
            steps = rng.randint(1, 6)
            t.set_user_attr(MM_KEY, {str(s): {"val_accuracy": round(rng.random(), 2),
                                              "train_time_s": round(s * rng.uniform(0.5, 2.0), 1)}
                                     for s in range(1, steps + 1)})
            u = rng.random()
            if u < 0.5:
                study.tell(t, [0.5, 1.0])
            elif u < 0.8:
                study.tell(t, state=TrialState.PRUNED)  # (else left running: ranked, not in the median)
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            got = rule.prune(study, t.number)
            assert got == literal(study, t.number, rule), f"trial {t.number}"
            checked += 1
            pruned += got
    assert checked >= 10 and 0 < pruned < checked


def test_the_tie_break_orders_by_hypervolume_contribution() -> None:
    # three points on one front (minimized): the middle one adds the most area against (4, 4)
    pts = np.array([[1.0, 3.0], [2.0, 1.5], [3.0, 1.0]])
    assert hv_order(pts, np.array([4.0, 4.0])).tolist() == [1, 0, 2]
    # the judged trial (last row) alone on the front: -1; sharing the second rank: a bonus in [-0.5, -0.1]
    assert step_rewards(np.array([[2.0, 2.0], [1.0, 1.0]]))[-1] == -1.0
    r = step_rewards(np.array([[1.0, 1.0], [2.0, 3.0], [3.0, 2.0]]))
    assert r[0] == 0.0 and sorted(r[1:].tolist()) == pytest.approx([0.5, 0.9])
    assert not math.isnan(r.sum())
