"""lifetime.py: the SIGTERM handler that fails a worker's trial through Optuna is in place only while asked."""

from __future__ import annotations

import os
import signal

import pytest

from autotune.core import lifetime


def test_sigterm_interrupts_only_inside_and_the_previous_handler_is_back(monkeypatch: pytest.MonkeyPatch) -> None:
    graces: list[float] = []
    monkeypatch.setattr(lifetime, "exit_after", graces.append)  # not this test process's deadline
    seen: list[int] = []

    def previous(signum: int, frame: object) -> None:
        seen.append(signum)

    old = signal.signal(signal.SIGTERM, previous)
    try:
        with pytest.raises(KeyboardInterrupt), lifetime.sigterm_interrupts():
            assert signal.getsignal(signal.SIGTERM) is lifetime.interrupt
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs in this (main) thread, right after
        assert graces == [lifetime.EXIT_GRACE_S]
        assert signal.getsignal(signal.SIGTERM) is previous
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, old)
