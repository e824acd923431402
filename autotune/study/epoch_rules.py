"""The stop rules that need the study, after each epoch of a trial: `vs_front`, Optuna's pruner (one objective),
Pareto pruning (several); and, where they cannot act because the trial's objectives are not reported every epoch,
saying so (its record's `pruning_off`, once per trial; a warning, once per run)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import optuna
from optuna.trial import TrialState

from autotune.core import TrialStopped
from autotune.search import pruners
from autotune.spec import RunConfig, TrialRecord, per_epoch
from autotune.study import records
from autotune.training import EpochRecord, TrainResult


class StudyRules:
    """One run's study-wide stop rules. `say(text)`: a run message, logged once per run."""

    def __init__(self, cfg: RunConfig, metrics: list[str], epoch_metrics: list[str],
                 pareto: pruners.ParetoStop | None, quality: tuple[str, str], say: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.metrics = metrics  # the objectives'
        self.epoch_metrics = epoch_metrics  # those known after every epoch: what Pareto pruning compares
        self.pareto = pareto
        self.quality = quality  # (metric, direction) vs_front compares
        self.say = say

    def after_epoch(self, trial: optuna.Trial, record: TrialRecord, history: Sequence[EpochRecord],
                    epochs: int) -> None:
        """Stop the trial (TrialStopped) after the last epoch of `history` (every epoch so far, as the context
        measured them), of `epochs` planned."""
        if not history:
            return
        rec = history[-1]
        p = self.cfg.pruning
        metric, direction = self.quality
        quality = rec.value(metric)
        if p.slow.vs_front is not None and rec.epoch < epochs and quality is not None:
            pruners.check_vs_front(rec.train_time_s, rec.epoch, epochs, quality, p.slow.vs_front,
                                   pruners.front_of(trial.study, self.cfg), metric, direction)
        if rec.epoch >= epochs:
            return
        # an epoch the fit reported nothing in: not a pruning question (a fit that never reports fails at its end)
        reported = bool(rec.metrics)
        if not self.cfg.multi_objective:
            value = rec.value(self.metrics[0])
            if value is not None:
                trial.report(value, rec.epoch)
                if trial.should_prune():
                    raise TrialStopped("pruned", rec.epoch, "Optuna pruner")
            elif reported and per_epoch(self.metrics[0]) and pruners.resolved_name(self.cfg) != "none":
                self.pruning_off(record, "pruning", [self.metrics[0]])
        elif self.pareto is not None:
            self._pareto(trial, record, history, epochs, self.pareto)

    def _pareto(self, trial: optuna.Trial, record: TrialRecord, history: Sequence[EpochRecord], epochs: int,
                pareto: pruners.ParetoStop) -> None:
        """Pareto pruning after the last epoch of `history`, once every per-epoch objective is reported."""
        last = history[-1]
        if unreported := [m for m in self.epoch_metrics if last.value(m) is None]:
            if last.metrics:  # (an epoch the fit reported nothing in: not a pruning question)
                # dominance on the other objectives alone would throw away a trial better on the one not known yet
                self.pruning_off(record, "Pareto pruning", unreported)
            return
        values = records.epoch_values([last], self.epoch_metrics)[0]
        # (pareto_asha judges at its rung epochs only: no storage read at the others)
        if not all(math.isfinite(v) for v in values) or not pareto.judges(len(history), epochs):
            return
        curve = records.epoch_values(history, self.epoch_metrics)
        # the other workers' running trials too (a rung peer as soon as it passed the rung: ASHA's table); the
        # storage re-reads unfinished trials on every get_trials, so they cost no extra query
        seen = trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED,
                                                              TrialState.RUNNING))
        others = [t for t in seen if t.number != trial.number]
        why = pareto.stop(curve[-1], len(curve), others, epochs, curve=curve)
        if why is not None:
            raise TrialStopped("dominated", len(curve), why)
        if any(t.state == TrialState.RUNNING for t in others):  # several workers: they see this trial's too
            records.publish(trial, TrialRecord(epoch_values=curve))

    def returned_only(self, record: TrialRecord, result: TrainResult) -> None:
        """A fit that reported nothing in its epochs and returned its objectives at the end: the per-epoch pruner
        never saw them. Said here, not at the epochs (a fit that never reports at all fails instead)."""
        if result.epochs_run < 2 or not result.history:
            return
        last = result.history[-1]  # train_time_s and the other clocks: known every epoch
        if not self.cfg.multi_objective:
            if per_epoch(self.metrics[0]) and pruners.resolved_name(self.cfg) != "none":
                self.pruning_off(record, "pruning", [self.metrics[0]])
        elif self.pareto is not None and (unreported := [m for m in self.epoch_metrics if last.value(m) is None]):
            self.pruning_off(record, "Pareto pruning", unreported)

    def pruning_off(self, record: TrialRecord, what: str, unreported: list[str]) -> None:
        """Said once, at the trial's first epoch without them (its record's `pruning_off`), and logged once per run:
        the study's per-epoch pruner cannot judge a trial on objectives it does not see each epoch."""
        if record.pruning_off is not None:
            return
        names = ", ".join(unreported)
        record.pruning_off = (f"{what} is off for this trial: {names} {'is' if len(unreported) == 1 else 'are'} not "
                              f"reported every epoch (ctx.report({unreported[0]}=...) in each epoch turns it on)")
        self.say(record.pruning_off)


__all__ = ["StudyRules"]
