"""Limits enforced from outside a trial's code: the hang limit, the run's timeout, host memory and Ctrl-C.

A training function can block where no check of the trial context runs (a `time.sleep`, an evaluation loop
between epochs, a wait on a queue). So a `Watch` keeps a thread that looks at the running trial every `POLL_S`
seconds and, when its wall time passes `hang_seconds`, the run's deadline passes or the process's memory would
leave the machine (or its cgroup) short, interrupts the main thread: a signal (the wake signal, `wake_signal`)
sent to it, whose handler raises `Interrupted` there (a BaseException: a fit's `except Exception` does not
swallow it). That ends a `time.sleep`, a Python loop and most torch calls at once. An interrupted trial is
interrupted again and again until it ends: the wake is sent again every `REDELIVER_S`, and every call the fit
makes on its trial context raises it again (`check`), so a bare `except:` that swallowed one does not carry on.

A trial still running `grace_s` after it was interrupted (stuck inside native code, or a fit that swallows
every exception) has its end recorded by the watch (`on_stuck`, given `WRITE_LIMIT_S` at most: a stalled storage
does not hold anything up). Then only the `autotune` program ends its process (lifetime.is_program); as a library
inside someone else's program (a notebook's kernel, a service) the process is never ended: the study stops and
the interrupt keeps being delivered until the fit gives way (`Watch.stuck` says which trial; the run raises
`StuckTrial` once Optuna sees it).

Ctrl-C and SIGTERM go through the same path while a run is watched: inside a trial's training they interrupt it
(`Interrupted("interrupted")`); anywhere else (Optuna's bookkeeping, the storage, a worker waiting for a slot)
they are noted (`Watch.interrupted`), the study is told to stop (`on_interrupt`: no trial is started after it),
and the run stops after the trial it is on, so no trial is left half-recorded (a third Ctrl-C there raises
KeyboardInterrupt at once: for a storage that hangs). A handler the host had installed for either signal is
called after ours (chained), one that ignores the signal or that Python cannot see (installed from C) is left
alone, and each is back when the watch ends (unless the fit replaced ours meanwhile: then theirs stays). As the
program, a terminated or interrupted process ends within `lifetime.EXIT_GRACE_S` whatever it is stuck on.

The wake signal is never one another tool owns: not SIGUSR1/SIGUSR2 (submitit's and Slurm's preemption signals,
faulthandler's dumps), but the highest real-time signal with no handler at all, Python's or native
(AUTOTUNE_WAKE_SIGNAL picks one by name or number, or `none`: no signal; then a pure-Python loop is still
interrupted, a blocking call only when it returns). Signal handlers are installed only from the main thread;
a run on another thread (a web handler, a ThreadPoolExecutor) is watched the same way without signals: its
thread is woken by an exception raised in it (a blocking call is interrupted when it returns), Ctrl-C and SIGTERM
never reach it (they go to the main thread), so its `cancel` event stops it; one warning says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from autotune.core import hostmem, lifetime, locks
from autotune.core.errors import AutotuneError
from autotune.core.hostmem import MemoryGuard  # (the host-memory rule the watch applies)

T = TypeVar("T")
DEFAULT_GUARD = MemoryGuard()  # (a frozen dataclass: one shared default is safe)
POLL_S = 0.1
GRACE_S = 10.0  # an interrupted trial that has not returned after this long is recorded from the watch (see above)
REDELIVER_S = 1.0  # an interrupted trial still running is interrupted again this often
WRITE_LIMIT_S = 10.0  # the watch's own write of a stuck trial's end, at most (then the program ends regardless)
FORCE_AFTER = 3  # the third Ctrl-C outside a trial raises KeyboardInterrupt at once (a storage that hangs)
CLAIM_HOLD_S = 2.0  # after the trial that acted on host memory ends, its claim is held this long (memory is freed)
WAKE_ENV = "AUTOTUNE_WAKE_SIGNAL"
_HERE = os.path.abspath(__file__)

rss_mb = hostmem.rss_mb
available_mb = hostmem.available_mb


class Interrupted(BaseException):  # noqa: N818 (as KeyboardInterrupt: not an error of the code it lands in)
    """Raised in the main thread inside a watched trial: it must end now. `reason`: hang | timeout | oom |
    interrupted; `detail`: one line saying why."""

    def __init__(self, reason: str = "interrupted", detail: str = "interrupted") -> None:
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}")


class Terminated(KeyboardInterrupt):
    """The run was ended by a signal whose host disposition is the default one (SIGTERM, where the host installed
    no handler): raised from the run, which sends the signal again once it has recorded and ended (`resend`), so
    the host ends as that signal ends it (exit 143), only later."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"ended by {signal.Signals(signum).name}")

    def resend(self) -> None:
        """The signal again, with the default disposition (the host's): the process ends here."""
        signal.signal(self.signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [self.signum])
        os.kill(os.getpid(), self.signum)
        time.sleep(1.0)  # (delivered at once; this is never reached unless the signal was blocked elsewhere)


class StuckTrial(AutotuneError):
    """A trial went on `grace_s` after it was interrupted; as a library its end was recorded from the watch and the
    run stopped (the host process is never ended)."""


# ---------------------------------------------------------------- the wake signal


def _native_handler(sig: int) -> int | None:
    """The process's disposition for `sig` as the kernel has it (0: default, 1: ignored, else a handler, which
    may be native: faulthandler's, a JVM's); None where it cannot be read."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(256)  # a struct sigaction (its first field: the handler)
        if libc.sigaction(sig, None, buf) != 0:
            return None
        return ctypes.c_void_p.from_buffer(buf).value or 0
    except (OSError, AttributeError):
        return None


def _free(sig: int) -> bool:
    return signal.getsignal(sig) == signal.SIG_DFL and _native_handler(sig) in (0, None)


def wake_signal() -> int | None:
    """The signal the watch wakes the main thread with (see the module's docstring); None: no signal."""
    asked = os.environ.get(WAKE_ENV, "").strip()
    if asked.lower() == "none":
        return None
    if asked:
        try:
            return int(asked) if asked.lstrip("-").isdigit() else int(getattr(signal, asked.upper()))
        except AttributeError:
            raise AutotuneError(f"{WAKE_ENV}={asked}: not a signal name or number (e.g. SIGRTMAX, 60, or none)") \
                from None
    rt = range(signal.SIGRTMAX, signal.SIGRTMIN, -1) if hasattr(signal, "SIGRTMAX") else range(0)
    return next((s for s in rt if _free(s)), None)


def _async_raise(ident: int | None, exc: type[BaseException] | None) -> None:
    """Raise `exc` in thread `ident` at its next Python instruction (None clears one not raised yet)."""
    if ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc) if exc else None)


class _Wake(BaseException):  # noqa: N818 (the no-signal wake, turned into the trial's Interrupted by Watch.run)
    pass


def _not_now(frame: Any) -> bool:
    """An interrupt must not land here: in the watch's own bookkeeping (the trial is ending), or anywhere inside an
    import (a module left half-initialized, torch._dynamo say, breaks every later import of it in the process)."""
    if frame is not None and os.path.abspath(frame.f_code.co_filename) == _HERE:
        return True
    for _ in range(500):
        if frame is None:
            return False
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


# ---------------------------------------------------------------- the watch


@dataclass
class _Trial:
    started: float
    hang_s: float | None
    on_stuck: Callable[[str, str], None] | None
    rss_mb: float
    pending: tuple[str, str, float] | None = None  # (reason, detail, when asked)
    woken: float = 0.0  # when the last wake was sent
    raised: bool = False  # an Interrupted was raised in the trial (Ctrl-C: once by the signal)
    recorded: bool = False  # the watch recorded its end (stuck)
    claim: locks.Claim | None = field(default=None, repr=False)  # its turn to act on host memory


_ACTIVE: dict[int, Watch] = {}  # the watch of each thread running a study (its trial's interrupt: `check`)


def check() -> None:
    """Raise the running trial's interrupt again, if it has one: every call a fit makes on its trial context
    does this, so an interrupt a fit swallowed comes back at its next call."""
    watch = _ACTIVE.get(threading.get_ident())
    t = watch._trial if watch is not None else None
    if t is not None and t.pending is not None:
        t.raised = True
        raise Interrupted(t.pending[0], t.pending[1])


class Watch:
    """One run's watchdog (see the module's docstring); `deadline_s`: seconds the run may take (None: no
    limit); `memory`: the host-memory rule (None: off); `on_interrupt`: called in the main thread when Ctrl-C
    or SIGTERM comes (the run's study is told to stop there: no trial starts after it); `cancel`: an event whose
    setting stops the run as Ctrl-C does, from any thread (the trial it is on is recorded interrupted, then the run
    returns: `cancelled`)."""

    def __init__(self, deadline_s: float | None = None, memory: MemoryGuard | None = DEFAULT_GUARD,
                 grace_s: float | None = None, on_interrupt: Callable[[], None] | None = None,
                 cancel: threading.Event | None = None) -> None:
        self.deadline = time.monotonic() + deadline_s if deadline_s else math.inf
        self.deadline_s = deadline_s
        self.memory = memory
        self.grace_s = GRACE_S if grace_s is None else grace_s
        self.on_interrupt = on_interrupt
        self.cancel = cancel
        self.cancelled = False  # the cancel event was set: the run stops after its current trial and returns
        self.interrupted = False  # Ctrl-C or SIGTERM came: the run stops after its current trial
        self.interrupts = 0
        self.stuck: tuple[str, str] | None = None  # (reason, detail) of a trial recorded from the watch
        self.host_exit: BaseException | None = None  # what the host's chained handler raised (its sys.exit)
        self.reraise: int | None = None  # a signal whose host disposition is the default: sent again after the run
        self.active = False  # watching (its signal handlers installed: on the main thread only)
        self.signals = False  # on the main thread: Ctrl-C, SIGTERM and the wake signal are handled
        self.wake: int | None = None
        self._lock = threading.RLock()  # (re-entrant: the main thread's handlers take it too)
        self._trial: _Trial | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous: dict[int, Any] = {}
        self._mine: dict[int, Any] = {}
        self._main = threading.main_thread().ident  # the thread the run trains in (the one that entered)
        self._exit_timer: Any = None
        self._claim_until = 0.0
        self._claim: locks.Claim | None = None
        self._outer: Watch | None = None

    def __enter__(self) -> Watch:
        self._main = threading.get_ident()
        if threading.current_thread() is threading.main_thread():
            self.signals = True
            self.wake = wake_signal()
            self._take(signal.SIGINT, self._on_interrupt)
            self._take(signal.SIGTERM, self._on_interrupt)
            if self.wake is not None:
                self._take(self.wake, self._on_wake, own=True)
                if self.wake not in self._previous:  # named, but another's: no signal (never theirs sent by us)
                    self.wake = None
        else:  # signals reach the main thread only: the trial's thread is woken by an exception raised in it
            print(f"warning: autotune: this study runs on thread {threading.current_thread().name!r}, not the main "
                  "thread: Ctrl-C and SIGTERM do not reach it (stop it with autotune.run(cfg, "
                  "cancel=threading.Event()) and set the event), and a trial blocked in one call (a sleep, I/O, "
                  "native code) is interrupted only when that call returns", file=sys.stderr, flush=True)
        self.active = True
        self._outer = _ACTIVE.get(self._main)
        _ACTIVE[self._main] = self
        self._thread = threading.Thread(target=self._loop, name="autotune-watch", daemon=True)
        self._thread.start()
        return self

    def _take(self, sig: int, handler: Callable[[int, Any], None], own: bool = False) -> None:
        """Install `handler` for `sig`, keeping the one before it; a signal the host ignores, or handles where
        Python cannot see (None: a native handler, which could not be put back), is left alone."""
        previous = signal.getsignal(sig)
        if previous is None or previous == signal.SIG_IGN or (own and not _free(sig)):
            return
        self._previous[sig] = previous
        self._mine[sig] = handler
        signal.signal(sig, handler)

    def __exit__(self, *exc: object) -> None:
        if not self.active:
            return
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self._release_claim()
        if self._outer is not None:
            _ACTIVE[self._main] = self._outer
        else:
            _ACTIVE.pop(self._main, None)
        self.active = False
        if not self.signals:
            return
        wake = [self.wake] if self.wake is not None and self.wake in self._previous else []
        signal.pthread_sigmask(signal.SIG_BLOCK, wake)  # a wake still on its way is taken here, not by SIG_DFL
        try:
            if wake and wake[0] in signal.sigpending():
                signal.sigwait(wake)
            for sig, handler in self._previous.items():
                if signal.getsignal(sig) == self._mine[sig]:  # (one the fit installed meanwhile stays: its own)
                    signal.signal(sig, handler)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, wake)
        if self._exit_timer is not None and not self.interrupted:
            self._exit_timer.cancel()

    def run(self, train: Callable[[], T], hang_s: float | None,
            on_stuck: Callable[[str, str], None] | None = None) -> T:
        """`train()` as one trial's training: its hang limit and the run's deadline apply, and Ctrl-C interrupts
        it. `on_stuck(reason, detail)`: called from the watch thread when the trial has not returned `grace_s`
        after being interrupted (it records the trial's end). A KeyboardInterrupt raised by the training code
        itself ends the run as Ctrl-C does. The trial ends when `train` returns here: an interrupt that has not
        landed by then is dropped (it never turns a finished trial into a stopped one)."""
        if not self.active:
            return train()
        with self._lock:
            self._trial = t = _Trial(time.monotonic(), hang_s, on_stuck, hostmem.rss_mb() or 0.0)
        try:
            if self.interrupted:
                self._raise("interrupted", "cancelled (the run's cancel event was set) before it trained"
                            if self.cancelled else "interrupted (Ctrl-C or SIGTERM) before it trained")
            try:
                return train()
            except _Wake:
                raise Interrupted(*(t.pending or ("interrupted", "interrupted"))[:2]) from None
            except KeyboardInterrupt as e:  # (a real Ctrl-C lands as Interrupted: this is the fit's own)
                from autotune.core.errors import user_where

                at = user_where(e)
                self.interrupted = True
                self._stop_study()
                detail = "KeyboardInterrupt raised by the training code" + (f" (at {at})" if at else "")
                raise Interrupted("interrupted", detail) from None
        finally:
            self._end(t)

    def _end(self, t: _Trial) -> None:
        with self._lock:
            if self._trial is t:
                self._trial = None
            if self.wake is None and t.pending is not None:
                _async_raise(self._main, None)  # a no-signal wake not raised yet is dropped with its trial
            if t.claim is not None:  # its memory is being freed: the claim goes a little later (the watch thread)
                self._claim, self._claim_until = t.claim, time.monotonic() + CLAIM_HOLD_S

    # ------------------------------------------------------------ the main thread's handlers

    def _raise(self, reason: str, detail: str) -> None:
        t = self._trial
        if t is not None:
            t.pending = t.pending or (reason, detail, time.monotonic())
            t.raised = True
        raise Interrupted(reason, detail)

    def _on_wake(self, signum: int, frame: Any) -> None:
        with self._lock:
            t = self._trial
            if t is None or t.pending is None:
                return  # the trial ended before the wake landed
            if _not_now(frame):
                return  # the next wake (REDELIVER_S) lands in the trial's own code, if it is still running
            t.raised = True
            reason, detail, _ = t.pending
        raise Interrupted(reason, detail)

    def _on_interrupt(self, signum: int, frame: Any) -> None:
        if lifetime.is_program() and self._exit_timer is None:
            # the program ends, whatever it is stuck on (every write before that is bounded by it)
            self._exit_timer = lifetime.exit_after(lifetime.EXIT_GRACE_S, 128 + signum)
        self.interrupts += 1
        self.interrupted = True
        if signum == signal.SIGTERM and self._previous.get(signum) == signal.SIG_DFL and not lifetime.is_program():
            self.reraise = signum  # the host's own disposition: ended by SIGTERM, once the run has recorded its trial
        self._stop_study()
        why = f"interrupted ({signal.Signals(signum).name})"
        try:
            self._chain(signum, frame)
        except BaseException as e:  # the host's handler asked to exit (sys.exit): the host's, after the trial is told
            self.host_exit = self.host_exit or e
            why = f"interrupted ({signal.Signals(signum).name}: the host's handler raised {type(e).__name__}" + \
                  (f"({e.code!r}))" if isinstance(e, SystemExit) else ")")
        t = self._trial
        if t is not None and not t.raised:
            if _not_now(frame):  # asked for now, delivered by the watch's next wake
                t.pending = t.pending or ("interrupted", why, time.monotonic())
                return
            self._raise("interrupted", why)
        if t is None and self.interrupts >= FORCE_AFTER and signum == signal.SIGINT:
            raise KeyboardInterrupt  # insisting, outside a trial: now (a trial being written may stay RUNNING)

    def _chain(self, signum: int, frame: Any) -> None:
        """The host's own handler for this signal, after ours (not Python's default ones: the run turns those into
        KeyboardInterrupt once its trial is recorded)."""
        previous = self._previous.get(signum)
        if callable(previous) and previous is not signal.default_int_handler and \
                not str(getattr(previous, "__module__", "")).startswith("autotune."):  # (ours stand in for those)
            previous(signum, frame)

    def _stop_study(self) -> None:
        if self.on_interrupt is not None:
            with contextlib.suppress(Exception):  # (Optuna refuses outside its optimize loop: a worker waiting)
                self.on_interrupt()

    # ------------------------------------------------------------ the watch thread

    def _loop(self) -> None:
        said = False
        while not self._stop.wait(POLL_S):
            try:
                self._cycle()
            except Exception as e:  # one cycle's failure (a lock folder, a /proc read) never ends the watching
                if not said:
                    said = True
                    print(f"warning: autotune's watchdog: one watch cycle failed ({type(e).__name__}: {e}); "
                          "watching goes on (hang_seconds, timeout and Ctrl-C still hold)", file=sys.stderr,
                          flush=True)

    def _cycle(self) -> None:
        """One look at the running trial (POLL_S apart)."""
        stuck = None
        with self._lock:
            t = self._trial
            now = time.monotonic()
            if self.cancel is not None and self.cancel.is_set() and not self.cancelled:
                self.cancelled = self.interrupted = True  # (the trial's own thread tells the study to stop)
                if t is not None and t.pending is None:
                    t.pending = ("interrupted", "cancelled (the run's cancel event was set)", now)
                    self._wake(t, now)
            if self._claim is not None and now > self._claim_until:
                self._release_claim()
            if t is not None and t.pending is None:
                why = self._why(t)
                if why is not None:
                    t.pending = (*why, now)
                    self._wake(t, now)
            elif t is not None and t.pending is not None:
                if now - t.woken > REDELIVER_S:
                    self._wake(t, now)  # it swallowed the last one, or is inside a native call
                if not t.recorded and now - t.pending[2] > self.grace_s:
                    t.recorded = True
                    stuck = t
        if stuck is not None:
            self._stuck(stuck)

    def _wake(self, t: _Trial, now: float) -> None:
        t.woken = now
        if self.wake is not None:
            signal.pthread_kill(self._main, self.wake)  # type: ignore[arg-type]
        else:
            _async_raise(self._main, _Wake)

    def _why(self, t: _Trial) -> tuple[str, str] | None:
        now = time.monotonic()
        if t.hang_s is not None and now - t.started > t.hang_s:
            return "hang", f"trial wall time over hang_seconds {t.hang_s:g} (hung or far too slow)"
        if now > self.deadline:
            return "timeout", f"the run's study.timeout ({self.deadline_s:g} s) passed"
        over = self.memory.exceeded(t.rss_mb) if self.memory is not None else None
        if over is None:
            return None
        if not over.startswith("host memory: the process holds"):  # memory short for all: one worker acts
            t.claim = t.claim or self.memory.claim()  # type: ignore[union-attr]
            if t.claim is None:
                return None  # another worker's trial on this host is acting on it
        return "oom", over

    def _release_claim(self) -> None:
        if self._claim is not None:
            self._claim.release()
            self._claim = None

    def _stuck(self, t: _Trial) -> None:
        """The interrupted trial is still running: record its end (at most WRITE_LIMIT_S, on a thread of its own),
        then end the process as the program; as a library, stop the run and keep interrupting the trial."""
        assert t.pending is not None
        reason, detail, _ = t.pending
        detail = f"{detail}; still running {self.grace_s:g} s after it was interrupted (stuck in native code, or " \
                 "catching every exception)"
        self.stuck = (reason, detail)
        if t.on_stuck is not None:
            writer = threading.Thread(target=t.on_stuck, args=(reason, detail), name="autotune-stuck-write",
                                      daemon=True)
            writer.start()
            writer.join(WRITE_LIMIT_S)
            if writer.is_alive():
                print(f"error: the storage did not take the stuck trial's end within {WRITE_LIMIT_S:g} s; the next "
                      "run fails it as orphaned", file=sys.stderr, flush=True)
        if lifetime.is_program():
            lifetime._exit_now(130 if reason == "interrupted" else 2)


__all__ = ["GRACE_S", "Interrupted", "MemoryGuard", "StuckTrial", "Terminated", "Watch", "available_mb", "check",
           "rss_mb", "wake_signal"]
