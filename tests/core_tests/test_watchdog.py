"""watchdog.py: limits that hold wherever a trial's code is, and signal handlers that are back afterwards."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from autotune.core import watchdog
from autotune.core.watchdog import Interrupted, MemoryGuard, Watch


def test_a_sleep_past_the_hang_limit_is_interrupted_and_the_handlers_are_back() -> None:
    before = {sig: signal.getsignal(sig) for sig in (watchdog.WAKE, signal.SIGINT, signal.SIGTERM)}
    t0 = time.monotonic()
    with Watch(memory=None) as watch, pytest.raises(Interrupted) as caught, watch.trial(hang_s=0.3):
        time.sleep(30)
    assert 0.3 <= time.monotonic() - t0 < 5
    assert caught.value.reason == "hang" and "hang_seconds 0.3" in caught.value.detail
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_the_run_deadline_interrupts_a_trial() -> None:
    with Watch(deadline_s=0.3, memory=None) as watch, pytest.raises(Interrupted, match=r"timeout: the run's "
                                                                                      r"study\.timeout \(0\.3 s\)"):
        with watch.trial(hang_s=None):
            time.sleep(30)


def test_ctrl_c_outside_a_trial_is_only_noted_and_stops_the_next_one() -> None:
    with Watch(memory=None) as watch:
        os.kill(os.getpid(), signal.SIGINT)  # e.g. during Optuna's bookkeeping: nothing raised there
        time.sleep(0.05)
        assert watch.interrupted
        with pytest.raises(Interrupted, match="interrupted"), watch.trial(hang_s=None):
            pytest.fail("a trial started after Ctrl-C must not train")


def test_ctrl_c_inside_a_trial_interrupts_it_once() -> None:
    with Watch(memory=None) as watch:
        with pytest.raises(Interrupted, match=r"interrupted \(SIGINT\)"), watch.trial(hang_s=None):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)
        os.kill(os.getpid(), signal.SIGINT)  # a second one during the cleanup: noted, nothing raised
        time.sleep(0.05)


def test_a_watch_started_off_the_main_thread_does_nothing() -> None:
    seen: list[object] = []

    def run() -> None:
        with Watch(memory=None) as watch, watch.trial(hang_s=0.01):
            time.sleep(0.2)
            seen.append(watch.active)

    th = threading.Thread(target=run)
    th.start()
    th.join()
    assert seen == [False]


def test_memory_over_the_cap_is_named() -> None:
    assert MemoryGuard(max_rss_mb=1).exceeded(0) == (
        f"host memory: the process holds {watchdog.rss_mb():.0f} MB, over pruning.max_host_memory_mb 1")
    assert MemoryGuard().exceeded(watchdog.rss_mb() or 0) is None  # this process has not grown: no verdict
