"""Who may end this process, and how autotune's own processes end.

Only the `autotune` program may end a process (`as_program`: its entry point, and the worker processes it
spawns): as a library inside someone else's program (a notebook's kernel, a service) autotune records its trial,
stops its study and returns or raises, and `exit_after` does nothing. Spawned worker processes never outlive
their driver, and a terminated one always ends: the parent-death signal, a watch on the parent in case that signal
is lost, and a deadline after SIGTERM for a process stuck on a lock. A worker that ends this way leaves its trial
to be failed and retried (orphans.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

EXIT_GRACE_S = 20.0  # a terminated worker still alive after this long is ended (see exit_after)
_PROGRAM = False  # this process is the `autotune` program (or a process it spawned), not a host's


def as_program(on: bool = True) -> None:
    """Say that this process is the `autotune` program itself (its entry point), or one it spawned to do its
    work: it may end the process (`exit_after`, the watchdog's last resort). Never called in a host's process."""
    global _PROGRAM
    _PROGRAM = on


def is_program() -> bool:
    return _PROGRAM


def interrupt(signum: int, frame: Any) -> None:
    """SIGTERM handler: fail the running trial through Optuna (KeyboardInterrupt), and end within EXIT_GRACE_S."""
    exit_after(EXIT_GRACE_S)
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While inside: SIGTERM raises KeyboardInterrupt wherever the code is (`interrupt`); the handler that was in
    place before is back afterwards."""
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_after(seconds: float, code: int = 128 + signal.SIGTERM) -> Any:
    """As the program (`is_program`), end this process with `code` in `seconds` if it has not exited by then, and
    return the timer (`.cancel()` takes it back); as a library, do nothing (None): a host's process is the host's
    to end. A KeyboardInterrupt raised at an unlucky instant (between a storage or logging lock's acquire and its
    release) can leave the worker waiting on that lock forever, with the driver gone: an immortal worker holding
    its trial RUNNING. Ended instead, its trial is an orphan of a dead process, which the next run fails and
    retries. So every write a terminated program still makes is bounded by `seconds`."""
    if not _PROGRAM:
        return None
    import threading

    timer = threading.Timer(seconds, _exit_now, args=(code,))
    timer.daemon = True
    timer.start()
    return timer


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def watch_parent(parent: int) -> None:
    """Terminate this worker, as the parent-death signal would, once its driver is gone: seen every second,
    in case that signal was lost (or came before the handler was in place)."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        exit_after(EXIT_GRACE_S)  # even if the handler below never gets to run
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="autotune-parent-watch", daemon=True).start()


def die_with_parent() -> None:
    """Linux: SIGTERM this worker when the driver dies, even by SIGKILL (no orphans training on)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def exit_text(code: int | None) -> str:
    """How a process ended, for a one-line note: "killed by SIGKILL", "exited with code 2"."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"
