"""The budget of a study shared by many workers, kept with Optuna's own records: no coordinator of our own,
the storage is the only shared state. Three rules keep a shared study honest:

- Exact budget. A worker starts a trial only while finished + running < n_trials, and a trial that
  lost a race (more workers passed that check than slots were left) ends itself before it samples
  anything: a trial runs only if fewer than n_trials trials numbered below it are still alive
  (finished, running or waiting). Trial numbers come from the storage in creation order, so this is
  exact on RDB and journal storages alike (`claim`, `ClaimedObjective`). A lost race is bookkeeping, not
  a failure: the trial ends PRUNED with `stop_reason: surplus` (Optuna's dashboard shows it pruned, the
  report under "surplus"), holds no slot and is left out of every count (`is_surplus`, `counts`).
- Stale trials. A trial whose worker is provably gone (a dead process on this host; on RDB storages
  with heartbeats, SQLite included, a heartbeat older than `grace_period`) is failed as `orphaned` and
  retried once with the same params (orphans.py); every worker looks every grace_period / 2 seconds
  (2 s without heartbeats), mid-trial and while waiting too (`StaleWatcher`, `next_step`). A dead worker
  on another host without heartbeats (a journal on NFS) cannot be seen (`autotune worker --fail-stale`
  clears those by hand).
- Waiting. A worker whose budget is all in flight elsewhere waits instead of exiting while it can
  still tell a dead trial: the study always ends with n_trials finished trials if any worker lives
  (`next_step`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core import optuna_compat as compat
from autotune.spec import RunConfig, TrialRecord
from autotune.study import orphans, records

log = logging.getLogger(__name__)
# Trials that hold a slot of the budget: done, in flight, or queued (a retry, an enqueued trial).
ALIVE = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)
TrialCallback = Callable[[optuna.Study, FrozenTrial], None]


SURPLUS = "surplus"  # the stop_reason of a trial that lost the race for the last slots (and its record's `surplus`)


def is_surplus(t: FrozenTrial) -> bool:
    """A trial that lost the race for the last slots: it never ran, holds no slot and counts nowhere."""
    return bool(TrialRecord.of(t).surplus)


def holds_slot(t: FrozenTrial) -> bool:
    return t.state in ALIVE and not (t.state == TrialState.PRUNED and is_surplus(t))


@dataclass(frozen=True)
class Counts:
    finished: int
    running: int
    waiting: int
    failed: int
    surplus: int = 0  # lost races (PRUNED, stop_reason surplus): in none of the others


def counts(trials: list[FrozenTrial]) -> Counts:
    by = {s: 0 for s in TrialState}
    surplus = 0
    for t in trials:
        if t.state == TrialState.PRUNED and is_surplus(t):
            surplus += 1
        else:
            by[t.state] += 1
    return Counts(finished=by[TrialState.COMPLETE] + by[TrialState.PRUNED], running=by[TrialState.RUNNING],
                  waiting=by[TrialState.WAITING], failed=by[TrialState.FAIL], surplus=surplus)


@dataclass(frozen=True)
class Seen:
    """What one read of a study showed: how many trials it held (numbered 0 .. total - 1) and how many alive."""
    total: int
    alive: int
    running: int = 0

    @classmethod
    def of(cls, trials: list[FrozenTrial]) -> Seen:
        return cls(total=len(trials), alive=sum(1 for t in trials if holds_slot(t)),
                   running=sum(1 for t in trials if t.state == TrialState.RUNNING))


def batch(seen: Seen | None, n_trials: int | None) -> int:
    """How many trials a worker may ask for before it reads the study again. Alone (no trial running elsewhere
    when it read): every free slot, since the claim's bound (`claim`) is exact for the trials it creates itself,
    so one read lasts to the budget's end. Beside other workers: half its share of the free slots, 1 near the
    end, so that the end is decided by a read ('wait' or 'done') rather than by a trial lost as surplus. 16
    without a budget. A read costs a few queries (Optuna's cached storage reads only the trials that changed);
    the claim still guards every trial, and the stale-trial watcher reaps between reads."""
    if seen is None:
        return 1
    if n_trials is None:
        return 16
    free = n_trials - seen.alive
    if seen.running == 0:
        return max(1, free)
    return max(1, free // (2 * (seen.running + 1)))


def claim(study: optuna.Study, number: int, n_trials: int, seen: Seen | None = None) -> bool:
    """May trial `number` run? Only if fewer than n_trials trials numbered below it are alive.

    Every alive trial was created before it (numbers follow creation), so of any n_trials + 1 trials
    that finish, the highest-numbered one saw the others alive when it checked: it cannot have run.
    `seen`: an earlier read of the study (the worker loop's, just before this trial was asked). At most
    seen.alive + (number - seen.total) trials below `number` can be alive (those it saw alive, and every one
    created after it: a finished trial stays finished), so far from the budget's end no read is needed.
    """
    if seen is not None and seen.alive + max(0, number - seen.total) < n_trials:
        return True
    ahead = sum(1 for t in study.get_trials(deepcopy=False, states=ALIVE) if t.number < number and holds_slot(t))
    return ahead < n_trials


class SurplusTrial(optuna.TrialPruned):
    """A trial that lost the race for the last slots: it ends at once, PRUNED (stop_reason surplus), before
    sampling anything."""


class _SurplusLogFilter(logging.Filter):
    """Optuna logs every ended trial; a surplus trial is bookkeeping, not a result."""

    def __init__(self) -> None:
        super().__init__()
        self.numbers: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(msg.startswith((f"Trial {n} failed", f"Trial {n} pruned")) for n in self.numbers)


class ClaimedObjective:
    """The objective every worker runs: claim a budget slot, then train (the storage stamped the trial's owner)."""

    def __init__(self, inner: Callable[[optuna.Trial], Any], n_trials: int | None) -> None:
        self.inner = inner
        self.n_trials = n_trials
        self.ran = 0  # trials this objective started (surplus ones included)
        self.surplus = 0
        self.seen: Seen | None = None  # the worker loop's last read of the study (`next_step`)
        self._filter = _SurplusLogFilter()

    def quiet(self) -> contextlib.AbstractContextManager[None]:
        """Around the `study.optimize` calls of this objective: Optuna logs no failure for a surplus trial (only
        for the block: Optuna's logger is left as it was)."""
        return compat.optimize_log_filter(self._filter)

    def __call__(self, trial: optuna.Trial) -> Any:
        self.ran += 1
        if self.n_trials is not None and not claim(trial.study, trial.number, self.n_trials, self.seen):
            self.surplus += 1
            self._filter.numbers.add(trial.number)
            why = f"the study's {self.n_trials} trials were already claimed by other workers (a lost race, not run)"
            surplus = TrialRecord(surplus=True)
            surplus.stopped(SURPLUS, 0, why)
            records.write(trial, surplus)  # (with the trial's end, as the objective's records)
            # The budget is claimed: end this batch here (no more surplus trials in it); the loop reads the study.
            trial.study.stop()
            raise SurplusTrial(f"trial {trial.number}: {why}")
        return self.inner(trial)


def next_step(study: optuna.Study, n_trials: int | None, claimed: ClaimedObjective | None = None) -> str:
    """'run', 'wait' (the budget is in flight in workers that may still die) or 'done'. `claimed`: the
    objective that claims the next trial's slot, told what this read saw (its claim then reads only near
    the budget's end)."""
    trials = study.get_trials(deepcopy=False)  # one read for both the dead trials and the budget
    if orphans.reap(study, trials=trials):
        trials = study.get_trials(deepcopy=False)
    if claimed is not None:
        claimed.seen = Seen.of(trials)
    if n_trials is None:
        return "run"
    c = counts(trials)
    if c.finished >= n_trials:
        return "done"
    if c.waiting or c.finished + c.running < n_trials:
        return "run"
    if orphans.heartbeats(study):
        return "wait"
    # No heartbeats: only trials of live processes on this host can still be seen dying.
    mine = [t for t in trials if t.state == TrialState.RUNNING and (o := orphans.owner_of(t)) is not None and o.here()]
    return "wait" if mine else "done"


class StaleWatcher:
    """Look for dead workers' trials while this one trains, not only between trials (Optuna's habit):
    a stale trial is failed and retried within grace_period + grace_period / 2, however long trials are."""

    def __init__(self, study: optuna.Study, cfg: RunConfig) -> None:
        import threading

        self.study = study
        grace = cfg.study.grace_period or 2 * (cfg.study.heartbeat_interval or 1)
        self.every = max(0.5, grace / 2) if orphans.heartbeats(study) else 2.0
        self.stop = threading.Event()
        self.failures = 0  # looks that raised (the first one is logged)
        self.thread = threading.Thread(target=self._loop, name="autotune-stale-watcher", daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            try:
                orphans.reap(self.study)
            except Exception as e:  # a storage hiccup here must not kill the worker; the main loop checks too
                self.failures += 1
                if self.failures == 1:  # said once: a storage that stays down would say it every few seconds
                    text = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
                    log.warning("the stale-trial watcher could not read the study (%s%s); it keeps trying, and "
                                "the worker loop looks between trials too", type(e).__name__,
                                f": {text}" if text else "")

    def __enter__(self) -> StaleWatcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def unless_surplus(cb: TrialCallback) -> TrialCallback:
    def call(study: optuna.Study, t: FrozenTrial) -> None:
        if not is_surplus(t):
            cb(study, t)

    return call
