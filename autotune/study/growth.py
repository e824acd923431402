"""Memory that grows across trials: a stop reason of its own.

Each trial's memory rules (watchdog.MemoryGuard) measure the trial's growth from its own start, so memory a fit
keeps from one trial to the next (tensors in a module-level list, a cache keyed by trial, a global model) is
never any trial's: each shows ~0 MB while the process's baseline climbs trial after trial, until the machine
runs short, or, with `pruning.max_host_memory_mb`, until every later trial is pruned `oom` at its start.
So the run reads the process's resident memory between trials (after a collection: what survived the trial) and
stops, with one line naming it, when
- that baseline is over `pruning.max_host_memory_mb` (no later trial could train under the cap), or OOM_IN_A_ROW
  trials in a row were pruned over that cap after the baseline grew since the first trial (the room the cap
  leaves a trial shrank: every later trial would be pruned the same way), or
- it rose after each of the last LEAK_STEPS trials and by LEAK_MIN_MB at least since the first trial ended (the
  first trial's own warm-up, imports and allocator pools, is the reference, not a leak).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.core import AutotuneError

LEAK_MIN_MB = 1024.0  # growth across trials below this is never called a leak (caches, allocator pools)
LEAK_STEPS = 3  # ... and only when each of this many trials in a row left the baseline higher
STEP_MIN_MB = 16.0  # a rise of the baseline smaller than this is noise (allocator, fragmentation)
OOM_IN_A_ROW = 2  # trials pruned over max_host_memory_mb in a row, the baseline grown: the cap's room is gone


class MemoryGrowth(AutotuneError):
    """The run stopped: the process's memory grows across trials (see the module's docstring)."""


@dataclass
class Growth:
    """The process's baseline after each trial (`after`); `cap_mb`: pruning.max_host_memory_mb."""

    cap_mb: float | None = None
    baselines: list[tuple[int, float]] = field(default_factory=list)  # (trial number, MB after it)
    over_cap: list[int] = field(default_factory=list)  # the trials in a row pruned over max_host_memory_mb

    def after(self, number: int, rss_mb: float | None, over_cap: bool = False) -> str | None:
        """Trial `number` ended (`over_cap`: pruned oom over max_host_memory_mb) and the process holds `rss_mb`:
        why the run must stop, or None."""
        if rss_mb is None:
            return None  # (not Linux: no reading)
        self.baselines.append((number, rss_mb))
        self.over_cap = [*self.over_cap, number] if over_cap else []
        first_n, first = self.baselines[0]
        if self.cap_mb is not None and rss_mb > self.cap_mb:
            return (f"memory grows across trials: the process holds {rss_mb:.0f} MB between trials (after trial "
                    f"{number}), over pruning.max_host_memory_mb {self.cap_mb:g}, so every later trial would be "
                    f"pruned oom at its start ({first:.0f} MB after trial {first_n}); {self._hint()}")
        if self.cap_mb is not None and len(self.over_cap) >= OOM_IN_A_ROW and rss_mb - first >= STEP_MIN_MB:
            return (f"memory grows across trials: the process holds {rss_mb:.0f} MB between trials (after trial "
                    f"{number}; {first:.0f} MB after trial {first_n}), leaving too little under "
                    f"pruning.max_host_memory_mb {self.cap_mb:g}: trials {', '.join(map(str, self.over_cap))} were "
                    f"pruned oom over it in a row, and every later trial would be; {self._hint()}")
        recent = [mb for _, mb in self.baselines[-(LEAK_STEPS + 1):]]
        rising = len(recent) == LEAK_STEPS + 1 and all(b - a >= STEP_MIN_MB for a, b in zip(recent, recent[1:]))
        if rising and rss_mb - first >= LEAK_MIN_MB:
            per = (recent[-1] - recent[0]) / LEAK_STEPS
            return (f"memory grows across trials: the process held {first:.0f} MB after trial {first_n} and "
                    f"{rss_mb:.0f} MB after trial {number} (+{per:.0f} MB a trial over the last {LEAK_STEPS}), while "
                    f"each trial's own rules measure only its own growth; {self._hint()}")
        return None

    @staticmethod
    def _hint() -> str:
        return ("something keeps each trial's memory after it ends (tensors in a module-level list, a cache, a "
                "global model); the run stopped, finished trials are kept")


__all__ = ["LEAK_MIN_MB", "LEAK_STEPS", "Growth", "MemoryGrowth"]
