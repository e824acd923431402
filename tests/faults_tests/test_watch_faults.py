"""The watchdog's own faults: an exception in one of its watch cycles is said once and watching goes on (a hang
is still caught after it)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from autotune.core import lifetime, watchdog
from autotune.core.watchdog import Interrupted, MemoryGuard, Watch


@pytest.fixture(autouse=True)
def library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifetime, "_PROGRAM", False)


class FailingGuard(MemoryGuard):
    """A memory rule whose reading fails (an unsafe lock folder, a /proc file gone) in its first `n` cycles."""

    def __init__(self, n: int) -> None:
        super().__init__()
        object.__setattr__(self, "left", [n])

    def exceeded(self, start_rss_mb: float) -> str | None:
        left: list[int] = self.left  # type: ignore[attr-defined]
        if left[0] > 0:
            left[0] -= 1
            raise PermissionError("/tmp/autotune-locks: owned by another user")
        return None


def test_an_error_in_a_watch_cycle_is_said_once_and_hang_detection_stays_on(capsys: Any) -> None:
    t0 = time.monotonic()
    with Watch(memory=FailingGuard(5)) as watch, pytest.raises(Interrupted) as caught:
        watch.run(lambda: time.sleep(30), hang_s=1.0)  # five failed cycles first, then the hang limit passes
    assert caught.value.reason == "hang"
    assert time.monotonic() - t0 < 10
    assert watch._thread is not None and not watch._thread.is_alive()  # (ended with the watch, not before)
    err = capsys.readouterr().err
    assert err.count("watchdog") == 1, err  # once, not once per cycle
    assert "PermissionError: /tmp/autotune-locks: owned by another user" in err and "goes on" in err


def test_the_watch_thread_outlives_a_failing_cycle_between_trials() -> None:
    with Watch(memory=FailingGuard(3)) as watch:
        watch.run(lambda: time.sleep(0.6), hang_s=None)  # the failures land here
        assert watch._thread is not None and watch._thread.is_alive()
        with pytest.raises(Interrupted, match="hang"):
            watch.run(lambda: time.sleep(30), hang_s=0.5)
    assert watchdog._ACTIVE == {}
