"""The arms of the replay benchmark: every strategy a user could pick, on the same workload, clock and budget.

- autotune's: `autotune.study.Objective` itself, its backend the replay (the real sampler, speed probe, stop rules,
  Pareto pruners and records), one objective per simulated worker (each worker is its own process for real), on
  the storage a real run has: a SQLite file, read at every epoch;
- plain Optuna: `optuna.create_study(directions=[max, min])` (in memory, a script's default) with Optuna's default
  multi-objective sampler (TPESampler(), seeded) and a hand-written objective that trains every trial to its end
  (Optuna cannot prune several objectives);
- random search: the same with RandomSampler;
- Optuna + OptunaHub's `multi_metric_pruner` (joint mode over MedianPruner(), as its README shows it): its rule
  in `OptunaHubRule`, from its published source;
- Syne Tune's MOASHA, as shipped and rank-corrected: bench/replay_syne.py, Syne Tune's own simulator over the same
  workload with no simulator latency.

Every arm's trials are answered by the same `Workload` and charged to a `SimClock` (Syne Tune: its own simulated
clock) with the same budget; each arm's own work (sampler, pruner, storage, records; Syne Tune's tuner loop and
scheduler) is charged too, in thread CPU seconds (`charge_cpu`), the surrogate's lookup never. One counting rule
for every arm that stops trials (`counted`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import optuna
import yaml

from autotune.config import from_dict
from autotune.search import make_sampler, nondominated_ranks, optuna_pruner, space
from autotune.search.credit import EPOCHS, length_free
from autotune.spec import RunConfig, TrialRecord
from autotune.study import make_storage
from autotune.study.objective import Objective
from autotune.study.outcome import CATCH, quiet_failures
from bench.replay_backend import Log, SimClock, replay_backend, replay_train, run_workers
from bench.replay_workload import ROOT, Workload

Events = list[tuple[float, float | None, float | None, str]]
Runner = Callable[[RunConfig, Workload, int, float, int, bool], Events]  # ..., workers, charge_cpu
MM_KEY = "multi_pruner:values"  # OptunaHub multi_metric_pruner's user attr: {step: {metric: value}}
SHM = Path("/dev/shm")  # autotune's SQLite file goes here where the machine has it (run_autotune)


def counted(cfg: RunConfig, params: dict[str, Any], k: int) -> bool:
    """The one counting rule for a trial stopped after epoch `k` (every arm that stops trials): its values after
    epoch k count toward the front only where they are what the configuration with `epochs: k` gives (epochs
    searched, k in range, a constant learning rate and no compression: autotune.search.credit.length_free)."""
    spec = cfg.space.get(EPOCHS)
    if spec is None or not (spec.low or 0) <= k <= (spec.high or 0):
        return False
    try:
        return length_free(space.fixed_point(cfg, {n: v for n, v in params.items() if n in cfg.space}))
    except (KeyError, TypeError, ValueError):
        return False


def stopped_point(cfg: RunConfig, t: optuna.trial.FrozenTrial) -> tuple[float, float] | None:
    """(accuracy, training time) of an autotune trial stopped early, where `counted`."""
    curve = TrialRecord.of(t).epoch_values or []
    if not curve or not counted(cfg, dict(t.params), len(curve)):
        return None
    return float(curve[-1][0]), float(curve[-1][1])


def run_autotune(cfg: RunConfig, workload: Workload, seed: int, budget: float, workers: int,
                 charge_cpu: bool = True) -> Events:
    """autotune's arm on the storage a real run has: a SQLite file (the default `study.storage`, made by
    `make_storage` as a run makes it), one objective per simulated worker; every study read of a trial (the
    objective's at each epoch, the sampler's stopped-as-shorter view, the probe's records) goes to it, and its CPU
    time is charged to the clock with the rest of the strategy's."""
    clock, log = SimClock(workers, budget, charge_cpu), Log()
    # in memory where the machine has it: the same reads and writes (their CPU time charged as before), without the
    # disk's fsync waits, which a real run pays in wall time and the simulated clock never charges
    with tempfile.TemporaryDirectory(dir=SHM if SHM.is_dir() else None) as tmp:
        # the budget is the study's timeout, as a user's run file gives it (simulated seconds: the trials' clocks)
        cfg = cfg.model_copy(update={"study": cfg.study.model_copy(update={"storage": f"sqlite:///{tmp}/study.db",
                                                                           "timeout": budget})})
        storage = make_storage(cfg)
        study = optuna.create_study(directions=cfg.directions, sampler=make_sampler(cfg, seed),
                                    pruner=optuna_pruner(cfg), storage=storage, study_name="replay")
        backend = replay_backend(workload, clock)
        objectives: dict[int, Objective] = {}

        def work() -> None:
            objective = objectives.setdefault(clock.worker, Objective(cfg, backend=backend))
            with quiet_failures():
                study.optimize(objective, n_trials=1, catch=CATCH,
                               callbacks=[log.callback(clock, lambda t: stopped_point(cfg, t))])

        try:
            run_workers(clock, work)
        finally:
            engine = getattr(storage, "engine", None)
            if engine is not None:
                engine.dispose()
    return log.sorted()


def plain(sampler: str, pruned: bool = False) -> Runner:
    """A user's own Optuna study (in memory, as a script's default): TPE (Optuna's default for several objectives)
    or random; `pruned`: OptunaHub's multi_metric_pruner as its README shows it (`MultiMetricPrunerTrial.report`
    of both metrics each epoch, then `should_prune`), its rule in `OptunaHubRule`."""
    def run(cfg: RunConfig, workload: Workload, seed: int, budget: float, workers: int,
            charge_cpu: bool = True) -> Events:
        clock, log = SimClock(workers, budget, charge_cpu), Log()
        smp = (optuna.samplers.RandomSampler(seed=seed) if sampler == "random"
               else optuna.samplers.TPESampler(seed=seed))  # Optuna's default sampler for several objectives
        study = optuna.create_study(directions=["maximize", "minimize"], sampler=smp)
        train = replay_train(workload, clock)
        rule = OptunaHubRule({"val_accuracy": "maximize", "train_time_s": "minimize"}) if pruned else None

        def objective(trial: optuna.Trial) -> tuple[float, float]:
            values = space.sample(trial, cfg)  # the same suggest calls a hand-written objective makes
            reported: dict[str, dict[str, float]] = {}

            def on_epoch(rec: Any) -> None:
                if rule is None:
                    return
                reported[str(rec.epoch)] = {"val_accuracy": float(rec.metrics["val_accuracy"]),
                                            "train_time_s": float(rec.train_time_s)}
                trial.set_user_attr(MM_KEY, reported)  # MultiMetricPrunerTrial.report
                if rec.epoch < int(values["epochs"]) and rule.prune(trial.study, trial.number):
                    raise optuna.TrialPruned(f"Pareto rank at epoch {rec.epoch}")

            r = train(SimpleNamespace(settings=values, probe=None), on_epoch=on_epoch)
            return r.val_accuracy, r.train_time_s

        def stopped(t: optuna.trial.FrozenTrial) -> tuple[float, float] | None:
            rep = t.user_attrs.get(MM_KEY) or {}
            last = max(map(int, rep), default=0)
            if not last or not counted(cfg, dict(t.params), last):
                return None
            return float(rep[str(last)]["val_accuracy"]), float(rep[str(last)]["train_time_s"])

        def work() -> None:
            study.optimize(objective, n_trials=1, catch=(ValueError, RuntimeError),
                           callbacks=[log.callback(clock, stopped)])

        run_workers(clock, work)
        return log.sorted()

    return run


# ---------------------------------------------------------------- OptunaHub's multi_metric_pruner, its rule


def hv_order(loss: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Row indices of 2-D minimized points, best first by greedy hypervolume contribution against `ref` (the
    greedy hypervolume subset selection Optuna makes in 2-D, which OptunaHub's pruner uses to break ties): on the
    unique rows in lexicographic order, the largest contribution first (ties: the earlier row), the row left over
    last; identical rows adjacent, in index order."""
    if len(loss) <= 1:
        return np.arange(len(loss))
    uniq, inverse = np.unique(loss, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    if len(uniq) == 1:
        order = np.zeros(1, dtype=int)
    else:
        idx = np.arange(len(uniq))
        vals = uniq.copy()
        corners = np.repeat(ref[None, :], len(uniq), axis=0)  # each point's box corner, given those chosen
        chosen = []
        for _ in range(len(uniq) - 1):
            j = int(np.argmax(np.prod(corners - vals, axis=1)))
            chosen.append(int(idx[j]))
            v = vals[j].copy()
            keep = np.ones(len(idx), dtype=bool)
            keep[j] = False
            idx, vals, corners = idx[keep], vals[keep], corners[keep]
            corners[:j, 0] = np.minimum(v[0], corners[:j, 0])  # rows before it (lower first value)
            corners[j:, 1] = np.minimum(v[1], corners[j:, 1])  # rows after it
        order = np.array(chosen + [int(i) for i in idx])
    return np.concatenate([np.flatnonzero(inverse == u) for u in order])


def step_rewards(values: np.ndarray) -> np.ndarray:
    """OptunaHub's values at one step, the last row the trial judged (all objectives minimized): each row's
    non-dominated rank; the judged trial on the front gets -1; otherwise the rows sharing its rank get a bonus
    from -0.5 (largest hypervolume contribution among them) to -0.1 (smallest), reference max(1.1 x, 0.9 x) of
    their worst values."""
    if len(values) < 2:
        return np.zeros(len(values))
    ranks = np.asarray(nondominated_ranks(values.tolist(), ["minimize"] * values.shape[1]))
    rewards = ranks.astype(float)
    if ranks[-1] == ranks.min():
        rewards[-1] -= 1.0
        return rewards
    same = np.flatnonzero(ranks == ranks[-1])
    worst = values[same].max(axis=0)
    order = hv_order(values[same], np.maximum(1.1 * worst, 0.9 * worst))
    rewards[same[order]] += -np.linspace(0.5, 0.1, len(order))
    return rewards


class OptunaHubRule:
    """OptunaHub `multi_metric_pruner` (optuna/optunahub-registry, package/pruners/multi_metric_pruner, as
    published in 2026-06): `MultiMetricPruner(MedianPruner(), metric_directions=..., joint=True)`, its rule applied
    directly (its synthetic study per epoch would cost minutes a run; tests/test_bench_replay.py checks this
    against Optuna's own MedianPruner on that synthetic study):
    - each trial's reported values per step are in the user attr `multi_pruner:values` ({step: {metric: value}});
    - at every step the judged trial reported, it and every other trial (any state) that reported there are
      ranked (`step_rewards`); the judged trial's intermediate value at that step is its reward;
    - MedianPruner's rule on those: with at least `n_startup_trials` (5) finished trials (complete, pruned or
      failed) that reported anything, the trial is pruned when its best (lowest) value over all its steps is above
      the median of the finished trials' values at its last step."""

    def __init__(self, metric_directions: dict[str, str], n_startup_trials: int = 5, n_warmup_steps: int = 0) -> None:
        self.metrics = list(metric_directions)
        self.signs = np.array([-1.0 if d == "maximize" else 1.0 for d in metric_directions.values()])
        self.n_startup_trials = n_startup_trials
        self.n_warmup_steps = n_warmup_steps
        self._finished: dict[int, dict[int, list[float]]] = {}  # trial number -> its steps, once it has finished
        self._of: tuple[int, int] | None = None  # the study those trial numbers are of

    def steps_of(self, study: optuna.Study, t: optuna.trial.FrozenTrial) -> dict[int, list[float]]:
        """`extract` of a trial's reported values; a finished trial's are kept (they no longer change) while the
        rule judges the same study (a trial number names a trial within one study only)."""
        of = (id(study._storage), study._study_id)
        if of != self._of:
            self._finished, self._of = {}, of
        if t.number in self._finished:
            return self._finished[t.number]
        steps = self.extract(t.user_attrs.get(MM_KEY, {}))
        if t.state.is_finished():
            self._finished[t.number] = steps
        return steps

    def extract(self, data: dict[str, dict[str, float]]) -> dict[int, list[float]]:
        """{step: [value per metric]}, the steps where every metric was reported."""
        return {int(k): [v[m] for m in self.metrics] for k, v in data.items() if all(m in v for m in self.metrics)}

    def rewards_at(self, step: int, mine: dict[int, list[float]],
                   theirs: list[dict[int, list[float]]]) -> tuple[float, dict[int, float]]:
        """(the judged trial's value at `step`, {index in `theirs`: its value there})."""
        at = [i for i, r in enumerate(theirs) if step in r]
        vs = np.array([theirs[i][step] for i in at] + [mine[step]], dtype=float) * self.signs
        if len(vs) < 2:
            return 0.0, {}
        r = step_rewards(vs)
        return float(r[-1]), {i: float(r[k]) for k, i in enumerate(at)}

    def prune(self, study: optuna.Study, number: int) -> bool:
        trials = study.get_trials(deepcopy=False)
        me = next(t for t in trials if t.number == number)
        if MM_KEY not in me.user_attrs:
            return False
        others = [t for t in trials if t.number != number]
        mine = self.extract(me.user_attrs[MM_KEY])
        theirs = [self.steps_of(study, t) for t in others]
        finished = [i for i, t in enumerate(others) if t.state.is_finished() and theirs[i]]
        if not finished or len(finished) < self.n_startup_trials or not mine:
            return False
        step = max(mine)
        if step < self.n_warmup_steps:
            return False
        now, others_now = self.rewards_at(step, mine, theirs)
        seen = [others_now[i] for i in finished if i in others_now]
        if not seen:
            return False
        median = float(np.percentile(seen, 50))
        if now <= median:
            return False
        # its best (lowest) value over its steps decides: one step at or below the median keeps it
        return all(self.above(s, mine, theirs, median) for s in sorted(mine, reverse=True) if s != step)

    def above(self, step: int, mine: dict[int, list[float]], theirs: list[dict[int, list[float]]],
              median: float) -> bool:
        """Whether the judged trial's value at `step` is above `median`. Its value is its rank, less 1 on the front,
        less a tie-break bonus in [0.1, 0.5] when others share its rank: only a rank within 0.5 above the median
        needs the bonus computed."""
        vs = [theirs[i][step] for i in range(len(theirs)) if step in theirs[i]] + [mine[step]]
        if len(vs) < 2:
            return 0.0 > median
        ranks = nondominated_ranks((np.array(vs, dtype=float) * self.signs).tolist(), ["minimize"] * len(self.signs))
        rank = ranks[-1]
        if rank == 0 or rank <= median:
            return False
        if rank - 0.5 > median:
            return True
        return self.rewards_at(step, mine, theirs)[0] > median


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


__all__ = ["Events", "MM_KEY", "OptunaHubRule", "Runner", "counted", "hv_order", "run_autotune", "step_rewards",
           "stopped_point", "variant"]
