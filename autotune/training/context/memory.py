"""A trial's peak memory (`peak_memory_mb`), measured so that one trial's peak never leaks into the next.

- CUDA: the caching allocator's peak (`torch.cuda.max_memory_allocated`), reset when the trial's training starts:
  the tensors alive then (the model, device-resident data) are part of it. Method `cuda_allocator`.
- CPU (Linux): the host memory the trial took at its peak, over what the process held when the trial began (its
  baseline: the runtime, and whatever earlier trials left behind, are not this trial's), plus what its child
  processes (DataLoader workers; not those the process had when the trial began) held of their own at once:
  - the process's resident-set high-water mark (`VmHWM` in /proc/self/status). The kernel keeps it for the process's
    lifetime (as `ru_maxrss`), but writing "5" to /proc/self/clear_refs resets it to the resident set of that moment,
    so the peak is this trial's. Method `vmhwm`. The reset is the kernel's, for the whole process, and cannot be
    undone (Linux's `ru_maxrss` of this process restarts with it), so it is done only in autotune's own processes
    (the `autotune` command, its workers), never in a host's: there, and where the reset is refused, a light thread
    samples `VmRSS` every `SAMPLE_S` (a peak shorter than that may be missed), and the untouched `VmHWM` counts
    where the trial raised it past its value at the trial's start (exact then): method `vmrss_sampled`;
  - its child processes' own memory (their unique set: the private pages of /proc/PID/smaps_rollup, so what a
    forked worker shares with its parent is not counted twice; `RssAnon` where the kernel has no smaps_rollup),
    summed over the children alive at each `CHILD_SAMPLE_S` and the highest sum kept. ` +workers` is added to the
    method once a child was seen.
  On several CPU ranks (one host's memory) the trial's peak is the ranks' sum (epoch_clock.py).
- Elsewhere (no /proc, MPS): nothing; the metric is absent, never zero.
"""

from __future__ import annotations

import re
import threading
import weakref
from pathlib import Path

import torch

from autotune.core import lifetime

SAMPLE_S = 0.02  # the sampling thread's period (the fallback only)
CHILD_SAMPLE_S = 0.1  # child processes (DataLoader workers) are looked at this often
_KB = re.compile(r"^(VmHWM|VmRSS|RssAnon):\s+(\d+)\s+kB", re.M)
_PRIVATE = re.compile(r"^Private_(?:Clean|Dirty):\s+(\d+)\s+kB", re.M)


def _status_mb(proc: Path) -> dict[str, float]:
    try:
        text = (proc / "status").read_text()
    except OSError:
        return {}
    return {k: int(v) / 1024 for k, v in _KB.findall(text)}


def _clear_hwm(proc: Path) -> bool:
    """Reset the process's VmHWM to its resident set now (Linux >= 4.0); False where it is refused."""
    try:
        (proc / "clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _children(proc: Path) -> list[str]:
    """The pids of a process's children (every thread's: a DataLoader is started from any thread)."""
    out: list[str] = []
    try:
        tasks = list((proc / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += (task / "children").read_text().split()
        except OSError:
            continue
    return out


def _own_mb(proc: Path) -> float:
    """A child's own memory: its private pages (smaps_rollup), else its anonymous resident set; 0 once gone."""
    try:
        return sum(int(kb) for kb in _PRIVATE.findall((proc / "smaps_rollup").read_text())) / 1024
    except OSError:
        return _status_mb(proc).get("RssAnon", 0.0)


def descendants_mb(proc: Path, before: frozenset[str] = frozenset()) -> tuple[float, int]:
    """(the own memory of every process below `proc`, summed; how many there are), leaving out the children in
    `before` and theirs: processes the trial did not start (a notebook's, an earlier trial's)."""
    total, n, todo, seen = 0.0, 0, [c for c in _children(proc) if c not in before], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        child = proc.parent / pid
        total += _own_mb(child)
        n += 1
        todo += _children(child)
    return total, n


class _Sampler:
    """Every `period` s on a daemon thread: the highest VmRSS (`own`: the fallback for a refused VmHWM reset) and
    the highest sum of the children's own memory."""

    def __init__(self, proc: Path, own: bool, before: frozenset[str]) -> None:
        self.proc = proc
        self.own = own
        self.before = before
        self.peak = _status_mb(proc).get("VmRSS", 0.0) if own else 0.0
        self.children_peak = 0.0
        self.children_seen = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="autotune-rss", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S if self.own else CHILD_SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        if self.own:
            self.peak = max(self.peak, _status_mb(self.proc).get("VmRSS", 0.0))
        mb, n = descendants_mb(self.proc, self.before)
        if n:
            self.children_seen = True
            self.children_peak = max(self.children_peak, mb)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def running(self) -> bool:
        return not self._stop.is_set()


class MemoryMeter:
    """One trial's peak memory in MB. Made when the trial begins (a CPU trial's baseline is taken then), `start()`
    when its training starts (the peak restarts there), `peak_mb()` any time after (None where nothing can be
    measured), `close()` at the trial's end. `proc`: the /proc directory of the process (a test points it at a fake
    tree: its children are found under `proc.parent`)."""

    def __init__(self, dev: torch.device, proc: Path = Path("/proc/self")) -> None:
        self.dev = dev
        self.proc = proc
        self.method: str | None = None  # cuda_allocator | vmhwm | vmrss_sampled (+workers); None: not measured
        self._sampler: _Sampler | None = None
        self._hwm_before: float | None = None  # VmHWM when a sampled trial began (its high-water mark not reset)
        self.baseline_mb = _status_mb(proc).get("VmRSS", 0.0) if dev.type == "cpu" else 0.0
        self.children_before = frozenset(_children(proc)) if dev.type == "cpu" else frozenset()  # not the trial's

    def start(self) -> None:
        self.close()
        self._sampler = None
        self._hwm_before = None
        if self.dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.dev)
            self.method = "cuda_allocator"
        elif self.dev.type == "cpu" and "VmRSS" in _status_mb(self.proc):
            hwm = self._may_reset() and _clear_hwm(self.proc) and "VmHWM" in _status_mb(self.proc)
            self.method = "vmhwm" if hwm else "vmrss_sampled"
            if not hwm:  # the high-water mark left as it is: it counts only where the trial raised it
                self._hwm_before = _status_mb(self.proc).get("VmHWM")
            self._sampler = _Sampler(self.proc, own=not hwm, before=self.children_before)
            weakref.finalize(self, self._sampler._stop.set)  # a meter nobody closed: its thread ends with it

    def _may_reset(self) -> bool:
        """Whether this meter may reset the process's high-water mark: the kernel's reset is for the whole process
        and also restarts its `ru_maxrss`, which a host (a service's metrics, a notebook's `%memit`) reads as its
        own lifetime peak. So only in autotune's own processes (lifetime.is_program), or on a /proc that is not
        this process's (a test's fake tree); in a host's process the VmRSS sampler measures instead."""
        return lifetime.is_program() or self.proc != Path("/proc/self")

    def peak_mb(self) -> float | None:
        """The peak since `start()`, in MB (2**20 bytes)."""
        if self.method == "cuda_allocator":
            return torch.cuda.max_memory_allocated(self.dev) / 2**20
        s = self._sampler
        if s is None:
            return None
        if s.running:
            s.sample()
        hwm = _status_mb(self.proc).get("VmHWM", 0.0)
        own = hwm if self.method and self.method.startswith("vmhwm") else s.peak
        if self._hwm_before is not None and hwm > self._hwm_before:  # the trial set the process's record: exact
            own = max(own, hwm)
        if s.children_seen and self.method is not None and not self.method.endswith("+workers"):
            self.method += "+workers"
        return max(0.0, own - self.baseline_mb) + s.children_peak

    def close(self) -> None:
        """Stop the sampling thread, if any (the peak stays readable)."""
        if self._sampler is not None and self._sampler.running:
            self._sampler.close()


def unavailable(dev: torch.device, proc: Path = Path("/proc/self")) -> str | None:
    """Why peak memory cannot be measured on `dev` here (None: it can)."""
    if dev.type == "cuda" or (dev.type == "cpu" and "VmRSS" in _status_mb(proc)):
        return None
    return f"no peak-memory reading on {dev.type} here (CUDA's allocator, or Linux's /proc/self/status for a CPU)"


__all__ = ["CHILD_SAMPLE_S", "SAMPLE_S", "MemoryMeter", "descendants_mb", "unavailable"]
