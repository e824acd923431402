"""Error types shared by every module.

`ConfigError` is the one shape of a user mistake: ``file: key.path: message``.
The CLI prints it as one line and exits 2; nothing else is ever shown to a user
as a traceback for bad input.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import reprlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

# Why a trial stopped before its last epoch (stored as the trial's `stop_reason`).
STOP_REASONS = ("diverged", "slow", "oom", "dominated", "early_stopped", "pruned", "unsupported", "error",
                "orphaned", "hang", "timeout", "interrupted", "memory")


MESSAGE_LIMIT = 2000  # characters of one ConfigError's message (the allowed names of a registry fit)


class AutotuneError(Exception):
    """Base class: anything autotune raises on purpose."""


class ConfigError(AutotuneError):
    """A user mistake in a config file, an override or a Python-API argument."""

    def __init__(self, file: str | None, key_path: str, message: str) -> None:
        self.file = file or "<config>"
        # What the file holds, shown as it is: a zero-width space in a key is `lr\u200b`, not a key that looks
        # right; and a message stays one readable line whatever the input's size.
        self.key_path = key_path = shorten(printable(key_path), 200)
        self.message = message = shorten(printable(redact(message)), MESSAGE_LIMIT)
        where = f"{self.file}: {key_path}: " if key_path else f"{self.file}: "
        super().__init__(where + message)


class StorageFault(AutotuneError):
    """The study's storage failed under a run or a read (a full disk, a read-only file system, a database server
    gone): one line naming the storage, the cause and what to do; what was written before it is kept."""


# errno → (what happened, what to do about it)
_OS_FAULTS = {28: ("the disk is full", "free space on it"), 122: ("the disk quota is exceeded", "free space on it"),
              30: ("the file system is read-only", "make it writable"), 5: ("an I/O error", "check the disk")}
# words in a database driver's message → (what happened, what to do about it)
_DB_FAULTS = (
    (("disk is full", "no space left", "could not extend file", "could not write"),
     ("the disk is full", "free space on it")),
    (("readonly database", "read-only", "read only"), ("the database is read-only", "make it writable")),
    (("disk i/o error",), ("an I/O error", "check the disk")),
    (("database is locked",), ("the database is locked by another process",
                               "give each SQLite file one writer (journal:/// or PostgreSQL take several)")),
)
_SERVER_GONE = ("the database server cannot be reached", "bring the database server back")


def storage_fault(exc: BaseException) -> tuple[str, str] | None:
    """(what happened, what to do) when `exc` (or an exception it was raised from or during, as Optuna's `Should
    not reach` is during a failed write) is the storage failing rather than autotune or a user's code; else None.
    Drivers' types are matched by name: core imports no database driver."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and len(seen) < 20:
        seen.add(id(e))
        found = _fault_of(e)
        if found is not None:
            return found
        e = e.__cause__ or e.__context__
    return None


def _fault_of(e: BaseException) -> tuple[str, str] | None:
    if isinstance(e, OSError) and e.errno in _OS_FAULTS:
        what, todo = _OS_FAULTS[e.errno]
        return f"{what} ({e.strerror})", todo
    names = {c.__name__ for c in type(e).__mro__}
    module = type(e).__module__.split(".")[0]
    if module not in ("sqlalchemy", "psycopg", "psycopg2", "sqlite3", "pymysql", "MySQLdb") or not \
            names & {"OperationalError", "InterfaceError", "DatabaseError"}:
        return None
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    low = text.lower()
    for words, (what, todo) in _DB_FAULTS:
        if any(w in low for w in words):
            return f"{what} ({shorten(first, 200)})", todo
    orig = getattr(e, "orig", None)  # the driver's own error, under SQLAlchemy's
    if "sqlite" in low or type(orig).__module__ == "sqlite3" or module == "sqlite3":
        return None  # a file: no server to lose
    if names & {"OperationalError", "InterfaceError"}:  # connections: refused, closed, terminated, timed out
        return f"{_SERVER_GONE[0]} ({shorten(first, 200)})", _SERVER_GONE[1]
    return None


class ConfigWarning(UserWarning):
    """A config that runs but does not do what it says (a condition that can never hold)."""


def warn_config(file: str | None, key_path: str, message: str) -> None:
    """Warn, in ConfigError's one-line shape, about a config that is accepted but likely not meant."""
    import warnings

    warnings.warn(ConfigWarning(str(ConfigError(file, key_path, message))), stacklevel=3)


@contextlib.contextmanager
def config_warnings_as_lines() -> Iterator[None]:
    """Inside: a ConfigWarning prints as one `warning: ...` line on stderr (others as Python shows them); the
    warnings machinery is restored on the way out (a command may run inside a user's process)."""
    import sys
    import warnings

    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], *rest: Any) -> None:
            if issubclass(category, ConfigWarning):
                print(f"warning: {message}", file=sys.stderr)
            else:
                shown(message, category, *rest)

        warnings.showwarning = show
        yield


class TrialStopped(AutotuneError):
    """Raised inside the trainer's epoch callback to end a trial early, with a reason."""

    def __init__(self, reason: str, epoch: int, detail: str = "") -> None:
        if reason not in STOP_REASONS:
            raise ValueError(f"unknown stop reason {reason!r}")
        self.reason = reason
        self.epoch = epoch
        self.detail = detail
        super().__init__(f"{reason} at epoch {epoch}" + (f": {detail}" if detail else ""))


def suggest(name: str, known: Iterable[str]) -> str:
    """' (did you mean 'x'?)' when a close match exists, else ''."""
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def one_of(known: Iterable[str]) -> str:
    """The sorted list of allowed names, for error messages."""
    return "allowed: " + ", ".join(sorted(str(k) for k in known))


def unknown(kind: str, name: object, known: Iterable[str], hint: str = "") -> str:
    """`unknown KIND 'name' (did you mean 'x'?); allowed: a, b, c` (+ hint): the one message for a name no
    registry holds."""
    names = list(known)
    return f"unknown {kind} {name!r}{suggest(str(name), names)}; {one_of(names)}{hint}"


def lookup(registry: Mapping[str, T], name: str, file: str | None, key_path: str, kind: str, hint: str = "") -> T:
    """`registry[name]`, or the ConfigError naming the key path, the close match and the allowed names."""
    try:
        return registry[name]
    except (KeyError, TypeError):  # TypeError: an unhashable value (a list given for a name)
        raise ConfigError(file, key_path, unknown(kind, name, registry, hint)) from None


def library_file(filename: str) -> bool:
    """Frames in autotune itself (the whole package, not only core/), installed packages or the standard library
    are not the user's code."""
    import os
    import sysconfig

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the autotune package
    path = os.path.abspath(filename)
    if path.startswith(here + os.sep) or "site-packages" in path or "dist-packages" in path:
        return True
    stdlib = sysconfig.get_paths().get("stdlib", "")
    return bool(stdlib) and path.startswith(os.path.abspath(stdlib) + os.sep) or filename.startswith("<frozen")


def user_where(exc: BaseException) -> str:
    """`file.py:LINE in func` of the innermost traceback frame in the user's own code ('' if none):
    where a user's factory, training function or module raised, for one-line error messages."""
    import os
    import traceback

    stored = exc.__dict__.get("_autotune_where") if hasattr(exc, "__dict__") else None
    if stored is not None:  # kept when the traceback itself was dropped (to free what its frames held)
        return str(stored)
    frames = traceback.extract_tb(exc.__traceback__)
    for fr in reversed(frames):
        if not library_file(fr.filename):
            return f"{os.path.basename(fr.filename)}:{fr.lineno} in {fr.name}"
    return ""


def user_frame() -> str:
    """`file.py:LINE in func` of the innermost frame of the running stack in the user's own code ('' if none):
    where a user's call into autotune (ctx.report, ctx.prepare...) came from, while it runs."""
    import os
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        if not library_file(frame.f_code.co_filename):
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return ""


def message_and_where(exc: BaseException) -> tuple[str, str]:
    """(the first line of the exception's message, where in the user's code it was raised); a message that
    already ends with ` (at WHERE)` (ContextMisuse's) is given without it."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    where = user_where(exc)
    return (text.removesuffix(f" (at {where})") if where else text), where


def shorten(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, cut at a word boundary (when one is in the second half) with '...'."""
    if len(text) <= limit:
        return text
    room = max(1, limit - 3)
    cut = text[:room + 1].rsplit(" ", 1)[0] if " " in text[room // 2:room + 1] else text[:room]
    return cut.rstrip(" ,;:") + "..."


def printable(text: str) -> str:
    """`text` with every invisible or control character escaped (`lr\u200b`, `\t`, `\xa0`): a message that
    quotes a user's key or value shows what the file holds, not text that looks like something else."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


_SHOWN = reprlib.Repr()
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlevel = 60, 60, 3
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 6


def shown(value: object, limit: int = 120) -> str:
    """A user's value quoted in a message: its repr, bounded in time and length whatever its size or nesting (a
    few items per level, a few levels), invisible characters escaped."""
    return shorten(printable(_SHOWN.repr(value)), limit)


def describe_exception(exc: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message (at file.py:LINE in func)`: one line for a user's exception."""
    text, where = message_and_where(exc)
    out = shorten(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, limit)
    return out + (f" (at {where})" if where else "")


_AT = re.compile(r" \(at (?P<where>[^()]*)\)$")


def error_signature(text: str) -> str:
    """What makes two failures "the same error" (`describe_exception`'s one line in, a key out): its type and its
    place in the user's code, not its message, which may hold a value that changes every trial (`got str
    '0.317'`). A failure without a place is known by its whole text."""
    m = _AT.search(text)
    if m is None:
        return text
    kind = text.split(":", 1)[0] if ":" in text[:m.start()] else text[:m.start()]
    return f"{kind.strip()} at {m['where']}"


# `scheme://user:PASSWORD@host` (greedy to the last @ of the word: a password may hold an unescaped @),
# and `password=...` in a URL's query string.
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*):(?P<pw>[^\s]*)@")
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&](?:password|passwd|pwd)=)[^&\s]*", re.IGNORECASE)


def redact(text: str) -> str:
    """Hide every password in storage URLs inside `text` (a URL, a message, a config value) as ***."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}:***@", text)
    return _QUERY_PASSWORD.sub(lambda m: f"{m['head']}***", text)
