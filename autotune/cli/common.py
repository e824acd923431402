"""What several commands share: the study flags (`--n-trials`, `--storage`, ...) and the run file they load."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from autotune.core import AutotuneError, ConfigError, config_warnings_as_lines, redact
from autotune.spec import SAMPLER_NAMES

STORAGE_ENV = "AUTOTUNE_STORAGE"  # a URL with a password reaches launch's jobs here, never in their pickled arguments


def port(text: str) -> int:
    """argparse's type for a TCP port: 0 (a free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535; got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535; got {value}")
    return value


def output_file(path: Path, file: str, flag: str, reads: Iterable[str | None] = ()) -> Path:
    """`path` as a file a command may write, checked before any work: not a folder, and not a file the command
    reads (`reads`: the run file), which writing would destroy."""
    if path.is_dir():
        raise ConfigError(file, flag, f"{path} is a folder; give a file name")
    for read in reads:
        if read is not None and Path(read).is_file() and path.exists() and path.resolve() == Path(read).resolve():
            raise ConfigError(file, flag, f"{path} is the run file this command reads; give another path")
    return path


def quoted(url: str) -> str:
    """The storage URL for a shell command we print: quoted, or `"$AUTOTUNE_STORAGE"` where it holds a password."""
    return f"'{url}'" if redact(url) == url else f'"${STORAGE_ENV}"'


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for flag, key in (("n_trials", "study.n_trials"), ("timeout", "study.timeout"), ("storage", "study.storage"),
                      ("sampler", "study.sampler"), ("seed", "study.seed"), ("study_name", "study.name")):
        value = getattr(args, flag, None)
        if value is not None:
            out[key] = value
    return out


def load(args: argparse.Namespace) -> Any:
    from autotune.config import load

    return load(args.file, overrides(args))


def add_study_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n-trials", type=int, help="finished trials the study should hold (overrides study.n_trials)")
    p.add_argument("--timeout", type=float, help="seconds for this run (overrides study.timeout)")
    p.add_argument("--storage", help="storage URL (overrides study.storage)")
    samplers = ", ".join(SAMPLER_NAMES[:-1]) + " or " + SAMPLER_NAMES[-1]  # the registry's names (spec.names)
    p.add_argument("--sampler", help=f"{samplers} (overrides study.sampler)")
    p.add_argument("--seed", type=int, help="sampler and training seed (overrides study.seed)")
    p.add_argument("--study-name", help="study name (overrides study.name)")


@contextlib.contextmanager
def optuna_quiet() -> Iterator[None]:
    """Optuna's logs at WARNING and above while a command runs; the caller's verbosity back afterwards."""
    import optuna

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


def trials_shown() -> contextlib.AbstractContextManager[None]:
    """Around a run behind the live view: Optuna does not log the failed trials the view shows (each trial's end
    with its error, once)."""
    from autotune.core import optuna_compat

    return optuna_compat.failed_trial_lines_off()


def run_command(cmd: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """A command's exit status; a user mistake (AutotuneError, ConfigError included) is one line and status 2 (no
    password of a storage URL reaches the terminal)."""
    # Optuna's INFO lines ("Using an existing study...") are not autotune's output; its verbosity, like the
    # warnings machinery, is restored on the way out (main() may run inside a user's process).
    with config_warnings_as_lines(), optuna_quiet():
        try:
            return cmd(args)
        except AutotuneError as e:
            print(f"error: {redact(str(e))}", file=sys.stderr)
            return 2


def ignore_more_interrupts() -> None:
    """The run was interrupted and the program is ending: a second Ctrl-C while it says so changes nothing (no
    KeyboardInterrupt escaping at exit). Only as the program itself: a caller's own process keeps its handler."""
    from autotune.core import lifetime

    if lifetime.is_program() and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def sigterm_stops() -> Iterator[list[int]]:
    """While inside, the first SIGTERM (a supervisor's: systemd, Kubernetes, a batch system) stops a `--workers` run
    (or `launch --wait`) as Ctrl-C does: the driver ends its workers and says what it stopped, instead of dying on
    the signal's default action with no word. Later ones are counted, not raised: the stop is already under way,
    and bounded (local_workers._Pool.terminate, launch.stop_jobs). The list yielded counts the SIGTERMs; the
    handler before is back afterwards. Only on the main thread (where Python runs signal handlers)."""
    terms: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield terms
        return

    def on_term(signum: int, frame: Any) -> None:
        terms.append(signum)
        if len(terms) == 1:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield terms
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_now(code: int) -> None:
    """End the process with `code` once its output is flushed, when a thread a user's code started (not a daemon)
    would keep it alive after the command is done: said in one note naming the threads. Without such a thread,
    return (the interpreter exits as usual)."""
    left = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if not left:
        return
    print(f"note: exiting with {len(left)} thread(s) your code started still running: {', '.join(sorted(left))}",
          file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
