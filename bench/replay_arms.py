"""The arms of the replay benchmark: every strategy a user could pick, on the same recording, clock and budget.

- autotune's: `autotune.study.Objective` itself, its backend the replay (the real sampler, speed probe, stop rules,
  Pareto pruners and records), one objective per simulated worker (each worker is its own process for real);
- plain Optuna: `optuna.create_study(directions=[max, min])` with Optuna's default multi-objective sampler
  (TPESampler(), seeded) and a hand-written objective that trains every trial to its end (Optuna cannot prune
  several objectives);
- random search: the same with RandomSampler;
- Optuna + a Pareto-rank pruner, as OptunaHub's `multi_metric_pruner` describes its joint mode (written from that
  description): after each epoch a trial's objectives go to its user attrs; every trial that reached that epoch
  is ranked by Pareto dominance (non-dominated sorting) on its values there, and the ranks are the intermediate
  values of a synthetic single-objective study (minimize) that Optuna's MedianPruner (its defaults) judges;
- Syne Tune's MOASHA: bench/replay_syne.py, Syne Tune's own simulator over the same recording.

Every arm's trials are answered by the same `Workload` and charged to a `SimClock` with the same budget; the
Optuna arms' own CPU time (sampler, pruner, records) is charged to it too (`charge_cpu`; Syne Tune's is not).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import yaml
from optuna.trial import TrialState

from autotune.config import from_dict
from autotune.search import make_sampler, nondominated_ranks, optuna_pruner, space
from autotune.spec import RunConfig
from autotune.study.objective import Objective
from autotune.study.outcome import CATCH, quiet_failures
from bench.replay_backend import Log, SimClock, replay_backend, replay_train, run_workers
from bench.replay_workload import ROOT, Workload

Events = list[tuple[float, float | None, float | None, str]]
Runner = Callable[[RunConfig, Workload, int, float, int, bool], Events]  # ..., workers, charge_cpu
MM_VALUES = "mm_values"  # user attr of the Pareto-rank arm: [[accuracy, training time], ...] per epoch


def run_autotune(cfg: RunConfig, workload: Workload, seed: int, budget: float, workers: int,
                 charge_cpu: bool = True) -> Events:
    clock, log = SimClock(workers, budget, charge_cpu), Log()
    study = optuna.create_study(directions=cfg.directions, sampler=make_sampler(cfg, seed),
                                pruner=optuna_pruner(cfg))
    backend = replay_backend(workload, clock)
    objectives: dict[int, Objective] = {}

    def work() -> None:
        objective = objectives.setdefault(clock.worker, Objective(cfg, backend=backend))
        with quiet_failures():
            study.optimize(objective, n_trials=1, catch=CATCH, callbacks=[log.callback(clock)])

    run_workers(clock, work)
    return log.sorted()


def plain(sampler: str, pruned: bool = False) -> Runner:
    def run(cfg: RunConfig, workload: Workload, seed: int, budget: float, workers: int,
            charge_cpu: bool = True) -> Events:
        clock, log = SimClock(workers, budget, charge_cpu), Log()
        smp = (optuna.samplers.RandomSampler(seed=seed) if sampler == "random"
               else optuna.samplers.TPESampler(seed=seed))  # Optuna's default sampler for several objectives
        study = optuna.create_study(directions=["maximize", "minimize"], sampler=smp)
        train = replay_train(workload, clock)
        judge = ParetoRankPruner(["maximize", "minimize"]) if pruned else None

        def objective(trial: optuna.Trial) -> tuple[float, float]:
            values = space.sample(trial, cfg)  # the same suggest calls a hand-written objective makes
            seen: list[list[float]] = []

            def on_epoch(rec: Any) -> None:
                if judge is None:
                    return
                seen.append([float(rec.metrics["val_accuracy"]), float(rec.train_time_s)])
                trial.set_user_attr(MM_VALUES, seen)
                if rec.epoch < int(values["epochs"]) and judge.should_prune(trial.study, trial.number, rec.epoch):
                    raise optuna.TrialPruned(f"Pareto rank at epoch {rec.epoch}")

            r = train(SimpleNamespace(settings=values, probe=None), on_epoch=on_epoch)
            return r.val_accuracy, r.train_time_s

        def work() -> None:
            study.optimize(objective, n_trials=1, catch=(ValueError, RuntimeError), callbacks=[log.callback(clock)])

        run_workers(clock, work)
        return log.sorted()

    return run


class ParetoRankPruner:
    """OptunaHub multi_metric_pruner's joint mode, from its description: at each step every trial that reached it
    is ranked by Pareto dominance, and the ranks are judged as a single minimized intermediate value by the base
    pruner, here Optuna's MedianPruner with its defaults, whose rule is applied directly (building a synthetic
    study per epoch costs minutes a run): with at least `n_startup_trials` (5) completed trials at the step, a
    trial whose rank is worse than their median rank is pruned."""

    def __init__(self, directions: list[str], n_startup_trials: int = 5) -> None:
        self.directions = directions
        self.n_startup_trials = n_startup_trials

    def should_prune(self, study: optuna.Study, number: int, step: int) -> bool:
        trials = study.get_trials(deepcopy=False)
        at = [(t, v[step - 1]) for t in trials if len(v := t.user_attrs.get(MM_VALUES) or []) >= step]
        completed = [i for i, (t, _) in enumerate(at) if t.state == TrialState.COMPLETE]
        mine = [i for i, (t, _) in enumerate(at) if t.number == number]
        if len(completed) < self.n_startup_trials or not mine:
            return False
        ranks = nondominated_ranks([list(v) for _, v in at], self.directions)
        return ranks[mine[0]] > statistics.median(ranks[i] for i in completed)


def variant(space_file: str | Path, pruning: dict[str, Any] | None = None, **study: Any) -> RunConfig:
    """The space's own config with `pruning` merged over its pruning section (one level deep) and `study` over its
    study section."""
    path = ROOT / space_file
    raw = yaml.safe_load(path.read_text())
    merged = dict(raw.get("pruning") or {})
    for k, v in (pruning or {}).items():
        merged[k] = {**merged[k], **v} if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
    raw["pruning"] = merged
    raw["study"] = {**raw["study"], **study}
    return from_dict(raw, source=str(path))


__all__ = ["Events", "MM_VALUES", "ParetoRankPruner", "Runner", "run_autotune", "variant"]
