"""CPU contention: how much of the CPU this process gets, and how many torch threads not to oversubscribe it.

A CPU trial whose cores are shared with another busy process (a user's other job, a second `--workers` process,
DataLoader workers) runs far below its configuration's speed: OpenMP threads spin-wait for a partner thread
that is not running, so 2 threads on 2 shared cores ran the digits CNN at 0.21x of a plain loop (7 s an epoch
instead of 0.3 s). That is the machine's state, not the configuration's speed. This module:

- `default_threads`: a thread count that divides this process's cores among the study's processes on the host
  (`--workers`) and leaves a core to each DataLoader worker;
- `Share`: the CPU this process got over a window, from its own threads' scheduler statistics
  (`/proc/self/task/*/schedstat`: time run and time spent runnable but waiting for a core). The waiting share
  is what this process lost to others, whatever the machine's load average says (other engineers' jobs that
  leave cores free do not count);
- `verdict`: a trial is oversubscribed when its samples/s fell well below the probe's figure for the same
  combination while its threads waited for cores; the objective records it, warns once, and (`lower_cap`) gives
  its next trials half the threads (`torch_threads`; user attr `cpu_threads_capped`);
- `busy_now`: the same reading, taken before a run's first CPU trial: on cores already busy it starts at the
  thread count an oversubscribed first trial would have left (`lower_cap`), not at all of them (on 2 shared cores
  a first digits trial took 15-100 s at 2 threads, its successors 0.4-6 s at 1).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

WAITING = 0.4  # waited for a core this share of its runnable time (quiet: a few %; a busy stranger: 0.5+)
COLLAPSE = 0.6  # samples/s below this share of the probe's figure for the same combination: not its own speed


def cores() -> int:
    """The cores this process may run on (its affinity mask, e.g. a container's or `taskset`'s)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_threads(workers: int = 1, loader_workers: int = 0, n_cores: int | None = None) -> int:
    """torch threads for one of `workers` processes sharing this host's cores, each feeding its trial from
    `loader_workers` DataLoader processes (each keeps a core busy while it loads)."""
    n = cores() if n_cores is None else n_cores
    return max(1, n // max(1, workers) - max(0, loader_workers))


def trial_threads(settings: Any, cap: int | None = None, torch_default: int | None = None) -> int:
    """The torch threads a CPU trial with these settings trains on: its `cpu_threads` when set; else the
    process's threads (`torch_default`, torch's now when None) or the `cap` after an oversubscribed trial, less
    one per DataLoader worker process (each keeps a core busy). accel.backend_flags applies it; the trial's
    `device` record and `best --export` say it."""
    if settings["cpu_threads"]:
        return int(settings["cpu_threads"])
    base = cap or torch_default or torch.get_num_threads()
    if not settings["data_on_device"] and settings["num_workers"]:
        return default_threads(1, int(settings["num_workers"]), n_cores=base)
    return base


def _schedstat() -> tuple[float, float] | None:
    """(seconds run, seconds waiting for a core) summed over this process's threads; None where not readable."""
    run = wait = 0
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    fields = f.read().split()
            except FileNotFoundError:  # the thread ended between the listing and the read
                continue
            run += int(fields[0])
            wait += int(fields[1])
    except (OSError, ValueError, IndexError):
        return None
    return run / 1e9, wait / 1e9


@dataclass(frozen=True)
class Share:
    """The CPU this process got from `start()` to `end()`: `waiting` is the share of its threads' runnable time
    spent waiting for a core (0: never waited; 0.5: half its time, e.g. 2 busy threads and a busy stranger on 2
    cores). Without schedstat (not Linux) it is 1 - CPU time / (wall x threads busy), a coarser guess."""

    wall_s: float
    run_s: float
    wait_s: float
    waiting: float

    def as_dict(self) -> dict[str, float]:
        return {"waiting": round(self.waiting, 3), "run_s": round(self.run_s, 3), "wait_s": round(self.wait_s, 3)}


class Window:
    """Measures the `Share` this process gets between its creation and `share()`."""

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads
        self._t0 = time.perf_counter()
        self._cpu0 = time.process_time()
        self._sched0 = _schedstat()

    def share(self) -> Share:
        wall = time.perf_counter() - self._t0
        now = _schedstat()
        if self._sched0 is not None and now is not None:
            run, wait = now[0] - self._sched0[0], now[1] - self._sched0[1]
            return Share(wall, run, wait, wait / (run + wait) if run + wait > 0 else 0.0)
        cpu = time.process_time() - self._cpu0
        busy = wall * min(self.threads or 1, cores())
        return Share(wall, cpu, max(0.0, busy - cpu), max(0.0, 1.0 - cpu / busy) if busy > 0 else 0.0)


def verdict(samples_per_s: float, probe_samples_per_s: float | None, share: Share,
            threads: int) -> dict[str, Any] | None:
    """What to record on a trial that ran oversubscribed (None: it did not): its threads waited for cores and its
    samples/s collapsed against the probe's figure for its combination (no figure: the probe's own window was
    contended too, so nothing says the trial ran at its speed; ratio null)."""
    if samples_per_s <= 0 or share.waiting < WAITING:
        return None
    ratio = samples_per_s / probe_samples_per_s if probe_samples_per_s else None
    if ratio is not None and ratio >= COLLAPSE:
        return None
    return {"ratio": round(ratio, 3) if ratio is not None else None, "threads": threads, "cores": cores(),
            "load": round(_load(), 2), **share.as_dict()}


CHECK_S = 0.3  # the check before a run's first CPU trial: this long a matmul loop on the trial's threads


def busy_now(threads: int, seconds: float = CHECK_S) -> Share | None:
    """Before a run's first CPU trial (no trial yet to say the cores are shared): a short matmul loop on `threads`
    torch threads; its Share when they waited for cores (`contended`), else None. Nothing is measured for one
    thread (no fewer to choose) or without schedstat (the coarse guess would read an idle thread as waiting)."""
    if threads <= 1 or _schedstat() is None:
        return None
    with torch_threads(threads):
        w = Window(threads)
        a = torch.randn(192, 192)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a @ a
        share = w.share()
    return share if contended(share) else None


def contended(share: Share) -> bool:
    """Did this process wait for cores so much over the window that its speed there is not its own?"""
    return share.waiting >= WAITING


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform
        return float("nan")


def lower_cap(cap: int | None, threads: int) -> int:
    """The thread count for the next trials after an oversubscribed one at `threads`: half as many (at least 1),
    never more than an earlier cap."""
    half = max(1, threads // 2)
    return half if cap is None else min(cap, half)


def warning(trial_number: int, found: dict[str, Any], next_threads: int | None) -> str:
    speed = f"{found['ratio']:.2f}x the speed probe's samples/s" if found["ratio"] is not None else \
        "its samples/s measured"
    later = f"later trials use {next_threads} thread(s)" if next_threads is not None else \
        "cpu_threads is set, so later trials keep it"
    return (f"trial {trial_number} ran oversubscribed: {speed} with its {found['threads']} thread(s) waiting for a "
            f"core {found['waiting']:.0%} of the time (other busy processes on these {found['cores']} cores; load "
            f"{found['load']}); its time is the machine's, not the configuration's (user attr oversubscribed); "
            f"{later}")


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `n` inside the block (None: unchanged), and put back after it."""
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
