"""watchdog.py: limits that hold wherever a trial's code is; a host's process is never ended, its signal handlers
are chained and put back, and the wake signal is never one another tool owns."""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from autotune.core import lifetime, watchdog
from autotune.core.watchdog import Interrupted, MemoryGuard, Watch


@pytest.fixture(autouse=True)
def library(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """This test process is a host (a library caller): whatever it does, nothing may end it. An exit asked for is
    recorded here instead."""
    exits: list[int] = []
    monkeypatch.setattr(lifetime, "_PROGRAM", False)
    monkeypatch.setattr(lifetime, "_exit_now", exits.append)
    return exits


def test_a_sleep_past_the_hang_limit_is_interrupted_and_the_handlers_are_back() -> None:
    wake = watchdog.wake_signal()
    assert wake is not None
    before = {sig: signal.getsignal(sig) for sig in (wake, signal.SIGINT, signal.SIGTERM)}
    t0 = time.monotonic()
    with Watch(memory=None) as watch, pytest.raises(Interrupted) as caught:
        watch.run(lambda: time.sleep(30), hang_s=0.3)
    assert 0.3 <= time.monotonic() - t0 < 5
    assert caught.value.reason == "hang" and "hang_seconds 0.3" in caught.value.detail
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_the_run_deadline_interrupts_a_trial() -> None:
    with Watch(deadline_s=0.3, memory=None) as watch, pytest.raises(Interrupted, match=r"timeout: the run's "
                                                                                      r"study\.timeout \(0\.3 s\)"):
        watch.run(lambda: time.sleep(30), hang_s=None)


def test_ctrl_c_outside_a_trial_stops_the_study_and_no_trial_trains_after_it() -> None:
    stopped: list[bool] = []
    with Watch(memory=None, on_interrupt=lambda: stopped.append(True)) as watch:
        os.kill(os.getpid(), signal.SIGINT)  # e.g. during Optuna's bookkeeping: nothing raised there
        time.sleep(0.05)
        assert watch.interrupted and stopped == [True]  # the study is told at once: Optuna asks for no next trial
        with pytest.raises(Interrupted, match="interrupted"):
            watch.run(lambda: pytest.fail("a trial started after Ctrl-C must not train"), hang_s=None)


def test_ctrl_c_inside_a_trial_interrupts_it_once_and_a_third_outside_raises_at_once() -> None:
    with Watch(memory=None) as watch:
        with pytest.raises(Interrupted, match=r"interrupted \(SIGINT\)"):
            watch.run(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(30)), hang_s=None)
        os.kill(os.getpid(), signal.SIGINT)  # a second one during the cleanup: noted, nothing raised
        time.sleep(0.05)
        with pytest.raises(KeyboardInterrupt):  # the third: the user insists (a storage that hangs)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)


def test_a_watch_off_the_main_thread_takes_no_signal_and_still_interrupts_a_python_loop() -> None:
    """Signals reach the main thread only: off it the watch installs no handler, and wakes the trial's own thread
    with an exception raised there (issue 50: before, it did nothing there, silently)."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    seen: list[object] = []

    def run() -> None:
        with Watch(memory=None) as watch:
            assert {sig: signal.getsignal(sig) for sig in before} == before
            try:
                watch.run(lambda: [time.sleep(0.01) for _ in range(3000)], hang_s=0.2)
            except Interrupted as e:
                seen.append(e.reason)
            seen.append(watch.signals)

    th = threading.Thread(target=run)
    th.start()
    th.join()
    assert seen == ["hang", False]
    assert watchdog._ACTIVE == {}


def test_memory_over_the_cap_is_named() -> None:
    assert MemoryGuard(max_rss_mb=1).exceeded(0) == (
        f"host memory: the process holds {watchdog.rss_mb():.0f} MB, over pruning.max_host_memory_mb 1")
    assert MemoryGuard().exceeded(watchdog.rss_mb() or 0) is None  # this process has not grown: no verdict


# ---------------------------------------------------------------- the wake signal: never another tool's


def test_the_wake_signal_is_a_free_real_time_signal_never_submitits_or_one_with_a_handler(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import faulthandler

    wake = watchdog.wake_signal()
    assert wake not in (signal.SIGUSR1, signal.SIGUSR2) and signal.SIGRTMIN <= wake <= signal.SIGRTMAX  # type: ignore
    faulthandler.register(wake)  # a native handler (invisible to signal.getsignal) on it: that one is not free
    try:
        other = watchdog.wake_signal()
        assert other is not None and other != wake
        with Watch(memory=None) as watch, pytest.raises(Interrupted, match="hang"):
            assert watch.wake == other
            watch.run(lambda: time.sleep(30), hang_s=0.2)
    finally:
        faulthandler.unregister(wake)
    monkeypatch.setenv(watchdog.WAKE_ENV, "SIGUSR2")  # asked for by name: taken only if free
    with Watch(memory=None) as watch:
        assert watch.wake == signal.SIGUSR2


def test_without_a_wake_signal_a_python_loop_is_still_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(watchdog.WAKE_ENV, "none")

    def spin() -> None:
        while True:
            sum(range(100))

    with Watch(memory=None) as watch, pytest.raises(Interrupted, match="hang"):
        assert watch.wake is None
        watch.run(spin, hang_s=0.2)


def test_a_wake_taken_by_the_host_is_left_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    monkeypatch.setenv(watchdog.WAKE_ENV, "SIGUSR2")
    previous = signal.signal(signal.SIGUSR2, lambda s, f: seen.append(s))  # submitit's preemption handler
    try:
        with Watch(memory=None) as watch, pytest.raises(Interrupted, match="hang"):
            assert signal.getsignal(signal.SIGUSR2) is not watch._on_wake and watch.wake is None
            watch.run(lambda: [sum(range(100)) for _ in range(10**9)], hang_s=0.2)  # woken without their signal
        assert seen == []
        os.kill(os.getpid(), signal.SIGUSR2)
        assert seen == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, previous)


# ---------------------------------------------------------------- the host's handlers: chained and put back


def test_a_hosts_sigterm_handler_is_chained_and_put_back() -> None:
    seen: list[int] = []

    def drain(signum: int, frame: Any) -> None:  # a service's own: it starts draining
        seen.append(signum)

    previous = signal.signal(signal.SIGTERM, drain)
    try:
        with Watch(memory=None) as watch, pytest.raises(Interrupted, match=r"interrupted \(SIGTERM\)"):
            watch.run(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(30)), hang_s=None)
        assert seen == [signal.SIGTERM] and watch.interrupted  # theirs ran, and the trial was stopped
        assert signal.getsignal(signal.SIGTERM) is drain
        assert not [t for t in threading.enumerate() if isinstance(t, threading.Timer)]  # no exit armed
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_ignored_signal_stays_ignored_and_a_handler_the_fit_installs_stays() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a daemon that ignores SIGTERM

    def fits_own(signum: int, frame: Any) -> None:
        pass

    try:
        with Watch(memory=None) as watch:
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # not taken
            watch.run(lambda: signal.signal(signal.SIGINT, fits_own), hang_s=None)  # (Lightning installs some)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is fits_own  # not clobbered by what was there before the watch
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_as_a_library_sigterm_arms_no_exit_and_as_the_program_it_does(monkeypatch: pytest.MonkeyPatch) -> None:
    assert lifetime.exit_after(0.01) is None  # a host's process is the host's to end
    monkeypatch.setattr(lifetime, "_PROGRAM", True)
    timer = lifetime.exit_after(60.0)
    assert timer is not None
    timer.cancel()


# ---------------------------------------------------------------- a trial that ends as the wake lands


def test_a_wake_landing_in_the_watchs_own_bookkeeping_is_not_raised() -> None:
    """The trial returned to the watch: the wake finds the watch's own frame and leaves it (the trial ends)."""
    scope: dict[str, Any] = {"sys": sys}
    exec(compile("frame = sys._getframe()", watchdog.__file__, "exec"), scope)  # a frame of watchdog.py's code
    with Watch(memory=None) as watch:
        watch._trial = watchdog._Trial(time.monotonic(), 0.0, None, 0.0, pending=("hang", "late", time.monotonic()))
        watch._on_wake(watch.wake or 0, scope["frame"])  # nothing raised
        with pytest.raises(Interrupted):
            watch._on_wake(watch.wake or 0, sys._getframe())  # in the trial's own code: raised
        watch._trial = None


def _busy(seconds: float, done: list[bool], out: int) -> int:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    done.append(True)
    return out


def test_trials_that_end_at_their_hang_limit_are_never_stopped_after_they_returned() -> None:
    """Trials whose training returns right as their hang limit passes: each is either interrupted while it trains
    or returns its result; never interrupted after returning, and no stale trial is left to the last resort."""
    stuck: list[str] = []
    late = 0
    with Watch(memory=None, grace_s=0.3) as watch:
        for i in range(30):
            done: list[bool] = []
            try:
                assert watch.run(functools.partial(_busy, 0.1, done, i), hang_s=0.1 + (i % 5) * 0.01 - 0.02,
                                 on_stuck=lambda r, d: stuck.append(r)) == i
            except Interrupted:
                late += bool(done)
        time.sleep(0.6)  # past the grace: a stale trial would be "stuck" now
    assert late == 0 and stuck == [] and watch.stuck is None


# ---------------------------------------------------------------- the last resort, as a library and as the program


def _swallowing(times: int, swallowed: list[int]) -> Any:
    def train() -> str:
        while len(swallowed) < times:
            try:
                time.sleep(30)
            except BaseException:  # noqa: B036 (a user's bare except)
                swallowed.append(1)
        return "gave up"
    return train


def test_as_a_library_a_stuck_trial_is_recorded_and_interrupted_again_but_the_process_lives(
        library: list[int]) -> None:
    recorded: list[tuple[str, str]] = []
    swallowed: list[int] = []
    with Watch(memory=None, grace_s=0.5) as watch:
        t0 = time.monotonic()
        out = watch.run(_swallowing(4, swallowed), hang_s=0.2, on_stuck=lambda r, d: recorded.append((r, d)))
    assert out == "gave up" and len(swallowed) == 4  # interrupted again and again (every REDELIVER_S) until it gave way
    assert time.monotonic() - t0 >= 0.2 + 3 * watchdog.REDELIVER_S * 0.9
    assert [r for r, _ in recorded] == ["hang"] and watch.stuck is not None
    assert library == []  # the host process was never ended


def test_every_context_call_raises_the_trials_interrupt_again() -> None:
    raised: list[str] = []

    def train() -> None:
        try:
            time.sleep(30)
        except BaseException:  # noqa: B036 (swallowed)
            pass
        for _ in range(3):
            try:
                watchdog.check()  # what ctx.backward / ctx.report / ... do first
            except Interrupted as e:
                raised.append(e.reason)

    with Watch(memory=None) as watch:
        watch.run(train, hang_s=0.2)
    assert raised == ["hang"] * 3
    watchdog.check()  # no trial: nothing


def test_the_last_resort_write_is_bounded_and_then_the_program_ends(monkeypatch: pytest.MonkeyPatch,
                                                                     library: list[int]) -> None:
    monkeypatch.setattr(lifetime, "_PROGRAM", True)
    monkeypatch.setattr(watchdog, "WRITE_LIMIT_S", 0.5)
    hung = threading.Event()
    swallowed: list[int] = []

    def stalled_storage(reason: str, detail: str) -> None:
        hung.wait(60)  # PostgreSQL / NFS not answering

    with Watch(memory=None, grace_s=0.3) as watch:
        t0 = time.monotonic()
        threading.Thread(target=lambda: (time.sleep(3), swallowed.append(99)), daemon=True).start()
        watch.run(_swallowing(3, swallowed), hang_s=0.2, on_stuck=stalled_storage)
        waited = time.monotonic() - t0
    hung.set()
    assert library == [2], library  # the program ended (exit 2: a hang), without waiting on the storage
    assert waited < 10


def test_a_keyboard_interrupt_raised_by_the_training_code_ends_the_run_as_ctrl_c() -> None:
    stopped: list[bool] = []

    def train() -> None:
        raise KeyboardInterrupt  # the user's own code

    with Watch(memory=None, on_interrupt=lambda: stopped.append(True)) as watch, \
            pytest.raises(Interrupted) as caught:
        watch.run(train, hang_s=None)
    line = train.__code__.co_firstlineno + 1
    assert caught.value.reason == "interrupted"
    assert caught.value.detail == f"KeyboardInterrupt raised by the training code (at {Path(__file__).name}:{line} " \
                                  "in train)"
    assert watch.interrupted and stopped == [True]


def test_an_interrupt_never_lands_inside_an_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hang limit passes while the trial imports a slow module (torch._dynamo, imported by ctx.prepare, takes
    seconds): the interrupt waits for the import to finish. Landed inside, it would leave the module half-initialized
    and every later import of it in this process broken."""
    (tmp_path / "slow_module_43.py").write_text("import time\ntime.sleep(0.8)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def train() -> None:
        import slow_module_43  # noqa: F401

        time.sleep(30)

    with Watch(memory=None) as watch, pytest.raises(Interrupted, match="hang"):
        watch.run(train, hang_s=0.2)
    assert sys.modules["slow_module_43"].DONE
