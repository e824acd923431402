"""Limits enforced from outside a trial's code: the hang limit, the run's timeout, host memory and Ctrl-C.

A training function can block where no check of the trial context runs (a `time.sleep`, an evaluation loop
between epochs, a wait on a queue). So a `Watch` keeps a thread that looks at the running trial every
`POLL_S` seconds and, when its wall time passes `hang_seconds`, the run's deadline passes or the process's
memory would leave the machine short, interrupts the main thread: a signal (`WAKE`) sent to it, whose handler
raises `Interrupted` there (a BaseException: a fit's `except Exception` does not swallow it). That ends a
`time.sleep`, a Python loop and most torch calls at once. A trial still running `grace_s` later (stuck inside
native code, or a fit that swallows every exception) is ended by the watch thread itself: `on_stuck` records
the trial's end and ends the process.

Ctrl-C and SIGTERM go through the same path while a run is watched: inside a trial's training they interrupt
it (`Interrupted("interrupted")`); anywhere else (Optuna's bookkeeping, the storage) they are only noted
(`Watch.interrupted`) and the run stops after the trial it is on, so no trial is left half-recorded.

Signal handlers are installed only from the main thread and the previous ones are back when the watch ends;
from another thread the watch does nothing (the trial context's own checks still apply).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

WAKE = signal.SIGUSR2  # the watch thread's signal to the main thread (handled only while a watch runs)
POLL_S = 0.1
GRACE_S = 10.0  # an interrupted trial that has not returned after this long is ended with its process
MARGIN_MB = 256.0  # host memory kept free at least (or 5% of the memory this process may use, if more)


class Interrupted(BaseException):  # noqa: N818 (as KeyboardInterrupt: not an error of the code it lands in)
    """Raised in the main thread inside a watched trial: it must end now. `reason`: hang | timeout | oom |
    interrupted; `detail`: one line saying why."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}")


# ---------------------------------------------------------------- host memory


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _meminfo_mb(key: str) -> float | None:
    text = _read("/proc/meminfo") or ""
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1]) / 1024
    return None


def _cgroup_mb() -> tuple[float, float] | None:
    """(limit, usage) of this process's memory cgroup (v2, else v1), where it has a limit."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read(limit_file), _read(usage_file)
        if limit and usage and limit.isdigit() and usage.isdigit() and int(limit) < 2**60:
            return int(limit) / 2**20, int(usage) / 2**20
    return None


def rss_mb() -> float | None:
    """This process's resident memory (Linux; None elsewhere)."""
    statm = _read("/proc/self/statm")
    if not statm:
        return None
    return int(statm.split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def available_mb() -> tuple[float, float] | None:
    """(memory this process may still take, the total it may use): the machine's MemAvailable, or what its
    cgroup's limit leaves when less. None where neither can be read (not Linux)."""
    avail, total = _meminfo_mb("MemAvailable"), _meminfo_mb("MemTotal")
    if avail is None or total is None:
        return None
    cg = _cgroup_mb()
    if cg is not None:
        avail, total = min(avail, cg[0] - cg[1]), min(total, cg[0])
    return avail, total


@dataclass(frozen=True)
class MemoryGuard:
    """When a trial's process takes too much host memory: over `max_rss_mb` (None: no cap of its own), or
    leaving less than the safety margin available while the trial itself grew by more than that margin (the
    machine's memory running short because of others is not this trial's doing)."""

    max_rss_mb: float | None = None

    def exceeded(self, start_rss_mb: float) -> str | None:
        rss = rss_mb()
        if rss is None:
            return None
        if self.max_rss_mb is not None and rss > self.max_rss_mb:
            return f"host memory: the process holds {rss:.0f} MB, over pruning.max_host_memory_mb {self.max_rss_mb:g}"
        room = available_mb()
        if room is None:
            return None
        margin = max(MARGIN_MB, 0.05 * room[1])
        if room[0] < margin and rss - start_rss_mb > margin:
            return (f"host memory: {room[0]:.0f} MB left available (under the {margin:.0f} MB safety margin) after "
                    f"the trial grew by {rss - start_rss_mb:.0f} MB")
        return None


# ---------------------------------------------------------------- the watch


@dataclass
class _Trial:
    started: float
    hang_s: float | None
    on_stuck: Callable[[str, str], None] | None
    rss_mb: float
    pending: tuple[str, str, float] | None = None  # (reason, detail, when asked)
    raised: bool = False


class Watch:
    """One run's watchdog (see the module's docstring); `deadline_s`: seconds the run may take (None: no
    limit); `memory`: the host-memory rule (None: off)."""

    def __init__(self, deadline_s: float | None = None, memory: MemoryGuard | None = MemoryGuard(),
                 grace_s: float | None = None) -> None:
        self.deadline = time.monotonic() + deadline_s if deadline_s else math.inf
        self.deadline_s = deadline_s
        self.memory = memory
        self.grace_s = GRACE_S if grace_s is None else grace_s
        self.interrupted = False  # Ctrl-C or SIGTERM came: the run stops after its current trial
        self.active = False  # handlers installed (main thread only)
        self._lock = threading.RLock()  # (re-entrant: the main thread's handlers take it too)
        self._trial: _Trial | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous: dict[int, object] = {}
        self._main = threading.main_thread().ident

    def __enter__(self) -> Watch:
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig, handler in ((WAKE, self._on_wake), (signal.SIGINT, self._on_interrupt),
                             (signal.SIGTERM, self._on_interrupt)):
            self._previous[sig] = signal.signal(sig, handler)
        self.active = True
        self._thread = threading.Thread(target=self._loop, name="autotune-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.active:
            return
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        signal.pthread_sigmask(signal.SIG_BLOCK, [WAKE])  # a wake still on its way is taken here, not by SIG_DFL
        try:
            if WAKE in signal.sigpending():
                signal.sigwait([WAKE])
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)  # type: ignore[arg-type]
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [WAKE])
        self.active = False

    @contextlib.contextmanager
    def trial(self, hang_s: float | None, on_stuck: Callable[[str, str], None] | None = None) -> Iterator[None]:
        """Around one trial's training: its hang limit and the run's deadline apply, and Ctrl-C interrupts it.
        `on_stuck(reason, detail)`: called from the watch thread when the trial has not returned `grace_s` after
        being interrupted (it should record the trial's end; the process then ends)."""
        if not self.active:
            yield
            return
        with self._lock:
            self._trial = _Trial(time.monotonic(), hang_s, on_stuck, rss_mb() or 0.0)
        try:
            if self.interrupted:
                self._raise("interrupted", "interrupted (Ctrl-C or SIGTERM) before it trained")
            yield
        finally:
            with self._lock:
                self._trial = None

    # ------------------------------------------------------------ the main thread's handlers

    def _raise(self, reason: str, detail: str) -> None:
        t = self._trial
        if t is not None:
            t.pending = t.pending or (reason, detail, time.monotonic())
            t.raised = True
        raise Interrupted(reason, detail)

    def _on_wake(self, signum: int, frame: object) -> None:
        with self._lock:
            t = self._trial
            if t is None or t.pending is None or t.raised:
                return  # the trial ended before the wake landed
            t.raised = True
            reason, detail, _ = t.pending
        raise Interrupted(reason, detail)

    def _on_interrupt(self, signum: int, frame: object) -> None:
        if signum == signal.SIGTERM:
            from autotune.core.lifetime import EXIT_GRACE_S, exit_after

            exit_after(EXIT_GRACE_S)  # a terminated process ends, whatever it is stuck on
        self.interrupted = True
        t = self._trial
        if t is not None and not t.raised:
            self._raise("interrupted", f"interrupted ({signal.Signals(signum).name})")

    # ------------------------------------------------------------ the watch thread

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            with self._lock:
                t = self._trial
                why = self._why(t) if t is not None and t.pending is None else None
                if t is not None and why is not None:
                    t.pending = (*why, time.monotonic())
                    signal.pthread_kill(self._main, WAKE)  # type: ignore[arg-type]
                stuck = t is not None and t.pending is not None and time.monotonic() - t.pending[2] > self.grace_s
            if stuck and t is not None and t.pending is not None:
                self._stuck(t)

    def _why(self, t: _Trial) -> tuple[str, str] | None:
        now = time.monotonic()
        if t.hang_s is not None and now - t.started > t.hang_s:
            return "hang", f"trial wall time over hang_seconds {t.hang_s:g} (hung or far too slow)"
        if now > self.deadline:
            return "timeout", f"the run's study.timeout ({self.deadline_s:g} s) passed"
        over = self.memory.exceeded(t.rss_mb) if self.memory is not None else None
        return ("oom", over) if over is not None else None

    def _stuck(self, t: _Trial) -> None:
        assert t.pending is not None
        reason, detail, _ = t.pending
        detail = f"{detail}; still running {self.grace_s:g} s after it was interrupted (stuck in native code, or " \
                 "catching every exception)"
        try:
            if t.on_stuck is not None:
                t.on_stuck(reason, detail)
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(130 if reason == "interrupted" else 2)


__all__ = ["GRACE_S", "Interrupted", "MemoryGuard", "Watch", "available_mb", "rss_mb"]
