"""Trials whose process is gone: who owns a RUNNING trial, how we prove it is dead, and failing it
(user attr `stop_reason: orphaned`) with one retry of the same settings.

Every trial is stamped with its owner by the storage itself, in the same write that creates it (`ask`)
or right as a queued one (a retry) is taken: the storages `storage.make_storage` builds are the
subclasses below, so every run path (`autotune run`, `--workers`, `autotune worker`, `autotune.run`)
stamps, and no trial exists unstamped while its process could die. Every run path calls `reap` when it
starts or resumes (workers also while they wait and while they train). An owner is provably gone when
- it ran on this host and its process is dead: no such process, a zombie, or a process of the same
  id that started at another time (the stamp holds the start time, so a reused pid is not mistaken
  for the owner). "This host" is the same hostname, boot and pid namespace (the stamp's `scope`):
  containers that share a hostname (`--network host`, some Slurm setups) number their processes each in
  their own pid namespace, so one container's pid says nothing about another's process; or
- its trial's heartbeat is older than `grace_period` (RDB storages with `heartbeat_interval`, SQLite
  included): this is the only way to see a dead owner on another host.
Anything else (another host, no heartbeats: a journal file on NFS) cannot be told from a slow trial
and is left RUNNING; `--fail-stale` (`reap(everywhere=True)`) clears those by hand.
"""

from __future__ import annotations

import copy
import os
import socket
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core import locks
from autotune.core import optuna_compat as compat
from autotune.spec import TrialRecord
from autotune.study import records

OWNER_ATTR = "worker"  # the stored key of a trial's owner (TrialRecord.worker): "host:pid:start:scope" of its process
REASON = "orphaned"
PROC = "/proc"


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) from /proc/PID/stat; None without /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()  # the command name (field 2) may hold spaces and parens
    try:
        return fields[0], int(fields[19])  # fields 3 and 22 of proc(5)
    except (IndexError, ValueError):
        return None


_SCOPE: tuple[int, str | None] | None = None  # (the pid it was read in, scope()): read once per process


def scope() -> str | None:
    """What a pid means here: this boot of this machine and this pid namespace (`BOOTID.PIDNS`: the boot id's first
    12 hex digits and the namespace's inode); None where /proc does not tell."""
    global _SCOPE
    if _SCOPE is None or _SCOPE[0] != os.getpid():
        _SCOPE = (os.getpid(), _read_scope())
    return _SCOPE[1]


def _read_scope() -> str | None:
    try:
        with open(f"{PROC}/sys/kernel/random/boot_id") as f:
            boot = f.read().strip().replace("-", "")[:12]
        namespace = os.stat(f"{PROC}/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}.{namespace}" if boot else None


def owner_id() -> str:
    """`host:pid:start:scope` of this process (`host:pid` where there is no /proc)."""
    pid = os.getpid()
    stat = _proc_stat(pid)
    where = scope()
    return f"{socket.gethostname()}:{pid}" + (f":{stat[1]}" if stat else "") + (f":{where}" if stat and where else "")


@dataclass(frozen=True)
class Owner:
    host: str
    pid: int
    start: int | None  # None: stamped where /proc was missing, or by an older autotune
    scope: str | None = None  # boot and pid namespace (`scope()`); None: stamped by an older autotune

    @classmethod
    def parse(cls, stamp: Any) -> Owner | None:
        if not isinstance(stamp, str):
            return None
        parts = stamp.rsplit(":", 3)
        if len(parts) == 4 and parts[1].isdigit() and parts[2].isdigit() and "." in parts[3]:
            return cls(parts[0], int(parts[1]), int(parts[2]), parts[3])
        parts = stamp.rsplit(":", 2)
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            return cls(parts[0], int(parts[1]), int(parts[2]))
        host, _, pid = stamp.rpartition(":")
        return cls(host, int(pid), None) if host and pid.isdigit() else None

    def here(self) -> bool:
        """Stamped on this host, in this boot and pid namespace: its pid is one this process can look up. (A stamp
        of an older autotune, without its scope, is known by its hostname alone.)"""
        return self.host == socket.gethostname() and (self.scope is None or self.scope == scope())

    def is_me(self) -> bool:
        return self == Owner.parse(owner_id())

    def alive(self) -> bool:
        """Is the process still running? Only meaningful on its own host."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # someone else's process: it exists
            pass
        stat = _proc_stat(self.pid)
        if stat is None:
            return True  # no /proc: a live pid is all we can know
        state, start = stat
        if state in ("Z", "X"):  # killed, not yet reaped by its parent
            return False
        return self.start is None or start == self.start  # another start time: the pid was reused


def owner_of(t: FrozenTrial) -> Owner | None:
    return Owner.parse(TrialRecord.of(t).worker)


def dead_here(t: FrozenTrial) -> bool:
    """A trial whose owner ran on this host and is gone."""
    o = owner_of(t)
    return o is not None and o.here() and not o.is_me() and not o.alive()


# ---------------------------------------------------------------- storages that stamp owners


def _owned_trial() -> FrozenTrial:
    """The template of a fresh trial: RUNNING, owned by this process (what `ask` would create, plus the stamp)."""
    return optuna.trial.create_trial(state=TrialState.RUNNING, user_attrs=TrialRecord(worker=owner_id()).attrs())


class RDBStorage(compat.HookedRDBStorage):
    """Optuna's RDBStorage (SQLite, PostgreSQL, MySQL) that stamps a trial's owner as it creates or takes
    it, and gives heartbeat-stale trials their reason before they are failed, whoever fails them: `reap`,
    or Optuna's own check before each trial (a finished trial takes no more attrs)."""

    def new_trial_template(self, template_trial: FrozenTrial | None) -> FrozenTrial:
        # every trial this storage creates (Optuna's _CachedStorage too); a template (a retry, an enqueued trial)
        # is kept as is.
        return template_trial or _owned_trial()

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Any = None) -> bool:
        return _taken(self, trial_id, state, super().set_trial_state_values(trial_id, state, values))

    def stale_found(self, trial_ids: list[int]) -> None:
        grace = self.grace_period or 2 * (self.heartbeat_interval or 0)
        for trial_id in trial_ids:
            owner = TrialRecord.of(self.get_trial(trial_id)).worker or "?"
            _mark(self, trial_id, f"no heartbeat from worker {owner} for over {grace}s: it died mid-trial")


class JournalStorage(optuna.storages.JournalStorage):
    """Optuna's JournalStorage that stamps a trial's owner as it creates or takes it (no heartbeats here)."""

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        return super().create_new_trial(study_id, template_trial or _owned_trial())

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Any = None) -> bool:
        return _taken(self, trial_id, state, super().set_trial_state_values(trial_id, state, values))


def _taken(storage: optuna.storages.BaseStorage, trial_id: int, state: TrialState, changed: bool) -> bool:
    """A queued (WAITING) trial this process just took for running (`ask`): it is ours now."""
    if changed and state == TrialState.RUNNING:
        records.put(storage, trial_id, TrialRecord(worker=owner_id()))
    return changed


def _mark(storage: optuna.storages.BaseStorage, trial_id: int, why: str) -> bool:
    try:
        records.put(storage, trial_id, TrialRecord(stop_reason=REASON, error=why))
        return True
    except optuna.exceptions.UpdateFinishedTrialError:
        return False  # another process failed it first


def retry_once(study: optuna.Study, t: FrozenTrial) -> None:
    """Queue one retry of a failed trial with the same params: Optuna's RetryHeartbeatStaleTrialCallback
    with max_retry=1 (the same `failed_trial` / `retry_history` system attrs) except that the retry starts
    without the dead attempt's user attrs: copied, a finished retry would show the dead owner, its history
    and `stop_reason: orphaned` (and another worker could reap it before it is stamped again).
    Also the storage's heartbeat_stale_trial_callback."""
    history = [*t.system_attrs.get("retry_history", []), t.number]
    if len(history) > 1:
        return  # a retry that died too: once is enough
    system_attrs = {**t.system_attrs, "failed_trial": t.system_attrs.get("failed_trial", t.number),
                    "retry_history": history}
    study.add_trial(optuna.create_trial(state=TrialState.WAITING, params=t.params, distributions=t.distributions,
                                        system_attrs=system_attrs))


# ---------------------------------------------------------------- failing orphans


def heartbeats(study: optuna.Study) -> bool:
    return compat.heartbeat_enabled(compat.storage_of(study))  # what Study.optimize itself checks


def reap(study: optuna.Study, everywhere: bool = False, trials: list[FrozenTrial] | None = None) -> list[int]:
    """Fail (stop_reason `orphaned`) every RUNNING trial whose owner is provably gone; queue one retry each.

    `everywhere`: every RUNNING trial not run by this process (the caller vouches that no other worker
    is alive: `--fail-stale`). `trials`: the study's trials as the caller just read them (one storage read
    fewer per trial in the worker loop). Returns the numbers of the trials this call failed.
    """
    storage = compat.storage_of(study)
    beats = heartbeats(study)

    def orphan(t: FrozenTrial) -> bool:
        o = owner_of(t)
        return dead_here(t) or (everywhere and not (o is not None and o.is_me()))

    if trials is None:
        trials = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if not beats and not any(orphan(t) for t in trials if t.state == TrialState.RUNNING):
        return []  # the common case, without taking the lock
    done: list[int] = []
    # processes on one host fail a dead trial once, not once each (and so retry it once)
    with locks.host_lock(study, "stale"):  # (no warnings.catch_warnings here: workers call this from a thread too)
        why: dict[int, str] = {}
        if beats:  # HeartbeatStorage marks these itself
            why.update(dict.fromkeys(compat.stale_trial_ids(storage, compat.study_id(study)), ""))
        for t in study.get_trials(deepcopy=True, states=(TrialState.RUNNING,)):
            if compat.trial_id(t) not in why and orphan(t):
                why[compat.trial_id(t)] = f"worker {TrialRecord.of(t).worker or '?'} died mid-trial"
        for trial_id, text in why.items():
            if text and not _mark(storage, trial_id, text):
                continue
            try:
                if not storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
                    continue
            except optuna.exceptions.UpdateFinishedTrialError:
                continue  # another worker got there first
            failed = copy.deepcopy(storage.get_trial(trial_id))
            retry_once(study, failed)
            done.append(failed.number)
    return sorted(done)




__all__ = ["OWNER_ATTR", "REASON", "JournalStorage", "Owner", "RDBStorage", "dead_here", "heartbeats", "owner_id",
           "owner_of", "reap", "retry_once", "scope"]
