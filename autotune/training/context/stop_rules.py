"""The trial's stop rules, as decisions: each returns a `TrialStopped` (stop) or None (go on) and raises nothing
itself; the trial context raises what they return.

In an epoch: a non-finite loss and the memory cap (checked every few steps), and the hang limit (`hang_seconds` of
wall time). At an epoch's end (rank 0): the record goes out, early stopping is counted, then non-finite losses and
objectives, divergence, the memory cap, projected time and the study's own rules (`on_epoch`: pruners, vs_front).
An epoch that ends the training is judged only for non-finite values: no rule discards training that is complete
(one over the memory cap then is infeasible: study/judge.py). A non-finite value of a reported metric that is
neither an objective nor a loss is recorded as it is.

The projected-time rule rests on the trial's own epoch times; epochs whose threads waited for cores (other busy
processes here, `contention.contended` over the trial so far) ran at the machine's speed, not the trial's: the
rule does not stop the trial then but looks again after the next epoch (the last is never stopped; the hang limit
still holds). A slow stop says that its epochs had their cores.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence

from autotune.core import TrialStopped, contention
from autotune.spec import Settings
from autotune.training.context.collective import Alone
from autotune.training.context.limits import Limits, check_divergence, check_memory, check_slow, projected_time_s
from autotune.training.context.results import EpochRecord, OnEpoch

# Waiting for cores made a 2-thread torch run up to 5x slower on these machines (OpenMP spinning): a projection
# further over its limit than twice that is slow whatever the machine's load.
CONTENDED_SLACK = 10.0


class StopRules:
    """One trial's rules. `settings`: the trial's (watched) settings, read where a rule applies them."""

    def __init__(self, settings: Settings, limits: Limits, on_record: OnEpoch | None = None,
                 on_epoch: OnEpoch | None = None,
                 early_stopping_on: Sequence[tuple[str, str]] = (("val_loss", "minimize"),),
                 cpu: Callable[[], contention.Share] | None = None, objectives: Sequence[str] = ()) -> None:
        self.settings = settings
        self.objectives = frozenset(objectives)  # a non-finite value of any of these is divergence, whatever its name
        self.limits = limits
        self.on_record = on_record  # sees every epoch's record first (the objective stores it)
        self.on_epoch = on_epoch  # the study's own stop rules (pruners, vs_front); may raise TrialStopped
        wall = limits.hang_seconds
        self.deadline = time.perf_counter() + wall if wall is not None else math.inf
        self.es_candidates = list(early_stopping_on)  # the first of these that is reported is watched
        self.best_es = math.inf
        self.since_best = 0
        self.stopped_early_at: int | None = None  # epoch at which early stopping ended training
        self.cpu = cpu or contention.Window().share  # the CPU this trial got since it started
        self.slow_deferred: list[int] = []  # epochs whose slow projection waited for cores: not acted on
        self.chance_loss = math.inf  # a guess's loss on the data (the built-in trainer's): divergence's ceiling

    # ------------------------------------------------------------ in an epoch

    def hung(self, epoch: int) -> TrialStopped:
        return TrialStopped("hang", epoch - 1, f"trial wall time over hang_seconds {self.limits.hang_seconds:g} "
                                               "(hung or far too slow)")

    def late(self) -> bool:
        return time.perf_counter() > self.deadline

    def in_epoch(self, nonfinite: bool, late: bool, epoch: int, peak_mb: float | None = None) -> TrialStopped | None:
        """The periodic in-epoch check: a non-finite loss, else the hang limit, else the memory cap."""
        if nonfinite:
            return TrialStopped("diverged", epoch, "non-finite training loss")
        if late:
            return self.hung(epoch)
        try:
            check_memory(peak_mb, epoch, self.limits.max_peak_memory_mb)
        except TrialStopped as e:
            return e
        return None

    def periodic(self, finite: bool, collective: Alone, epoch: int,
                 peak_mb: Callable[[], float | None] | None = None) -> TrialStopped | None:
        """The check every FINITE_CHECK_EVERY steps: a non-finite loss, the memory cap (`peak_mb` reads this rank's
        peak; the highest rank's counts), and, on several devices, the hang limit: every rank learns what any rank
        saw, so all stop at this same step."""
        nonfinite, late = collective.any([not finite, not collective.alone and self.late()])
        peak = None
        if self.limits.max_peak_memory_mb is not None and peak_mb is not None:
            peak = collective.max([p if (p := peak_mb()) is not None else -1.0])[0]
        return self.in_epoch(nonfinite, late, epoch, peak if peak is not None and peak >= 0 else None)

    # ------------------------------------------------------------ at an epoch's end

    def verdict(self, rec: EpochRecord, history: Sequence[EpochRecord], measured_loss: bool, epochs: int,
                chance_loss: float, collective: Alone) -> TrialStopped | None:
        """The trial's verdict on the epoch, the same on every rank: rank 0 decides (the only process, without
        several devices), the others learn it (and whether early stopping ended training)."""
        stop = self.decide(rec, history, measured_loss, epochs, chance_loss) if collective.rank == 0 else None
        stop, self.stopped_early_at = collective.decision(stop, self.stopped_early_at)
        return stop

    def decide(self, rec: EpochRecord, history: Sequence[EpochRecord], measured_loss: bool, epochs: int,
               chance_loss: float) -> TrialStopped | None:
        """Rank 0's verdict on the epoch `rec` (the last of `history`); `measured_loss`: its train_loss comes from
        ctx.backward's losses. Clears `stopped_early_at` when the trial stops instead."""
        if self.on_record is not None:
            self.on_record(rec)
        self.early_stopping(rec.metrics, rec.epoch, epochs)
        final = self.stopped_early_at is not None or rec.epoch >= epochs
        stop = self.check(rec, history, measured_loss, epochs, chance_loss, final)
        if stop is None and self.on_epoch is not None:
            try:
                self.on_epoch(rec)
            except TrialStopped as e:
                stop = e
        if stop is None or (final and not stop.detail.startswith("non-finite")):
            return None
        self.stopped_early_at = None
        return stop

    def check(self, rec: EpochRecord, history: Sequence[EpochRecord], measured_loss: bool, epochs: int,
              chance_loss: float, final: bool = False) -> TrialStopped | None:
        """The rules that need only this trial: non-finite losses, then (before its last epoch) divergence and
        projected time."""
        if measured_loss and not math.isfinite(rec.train_loss):
            return TrialStopped("diverged", rec.epoch, "non-finite training loss")
        for key, v in rec.metrics.items():  # an objective (val_ppl, val_accuracy...) or any loss; another metric
            if not math.isfinite(v) and (key in self.objectives or key.endswith("loss")):  # is recorded as it is
                return TrialStopped("diverged", rec.epoch, f"non-finite {key}"
                                    + (" (an objective)" if key in self.objectives else ""))
        if final:
            return None
        losses = [r.train_loss for r in history]
        try:
            if self.limits.loss_factor is not None and all(math.isfinite(v) for v in losses):
                check_divergence(losses, self.limits.loss_factor, rec.epoch, chance_loss)
            check_memory(rec.peak_memory_mb, rec.epoch, self.limits.max_peak_memory_mb)
            check_slow(rec.train_time_s, rec.epoch, epochs, self.limits.max_trial_seconds)
        except TrialStopped as e:
            if e.reason != "slow":
                return e
            projected = projected_time_s(rec.train_time_s, rec.epoch, epochs)
            return self._unless_contended(e, projected / float(self.limits.max_trial_seconds or math.inf))
        return None

    def _unless_contended(self, stop: TrialStopped, over: float) -> TrialStopped | None:
        """A slow projection from epochs that waited for cores decides nothing (looked at again next epoch), unless
        it breaks the limit by more than waiting for cores could explain (`CONTENDED_SLACK` times)."""
        share = self.cpu()
        if contention.contended(share):
            if over > CONTENDED_SLACK:
                return TrialStopped(stop.reason, stop.epoch, f"{stop.detail} (its epochs waited for cores "
                                    f"{share.waiting:.0%}, but {over:.0f}x the limit is more than that explains)")
            self.slow_deferred.append(stop.epoch)
            return None
        return TrialStopped(stop.reason, stop.epoch, f"{stop.detail} (its epochs had their cores: waited "
                                                     f"{share.waiting:.0%})")

    def early_stopping(self, values: Mapping[str, float], epoch: int, epochs: int) -> None:
        """`early_stopping_patience` epochs without an improvement of the watched metric (val_loss by default)."""
        watched = next(((m, d) for m, d in self.es_candidates if m in values), None)
        if watched is None:  # (the setting is read, so used, only where a watched metric is reported)
            return
        patience = int(self.settings["early_stopping_patience"])
        if not patience:
            return
        v = values[watched[0]] if watched[1] == "minimize" else -values[watched[0]]
        if v < self.best_es - float(self.settings["early_stopping_min_delta"]):
            self.best_es, self.since_best = v, 0
        else:
            self.since_best += 1
        if self.since_best >= patience and epoch < epochs:
            self.stopped_early_at = epoch


__all__ = ["StopRules"]
