"""References to the user's code and files in a run file: `package.module:function` and relative paths."""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.core.errors import ConfigError, describe_exception, library_file

# A framework a user's module imports -> the autotune extra that installs it (a missing one is named by its extra)
EXTRAS = {"lightning": "lightning", "pytorch_lightning": "lightning", "timm": "timm", "torchvision": "vision",
          "transformers": "hf", "accelerate": "hf"}


def check_fit_signature(fn: Any, ref: str, file: str) -> None:
    """A training function is called as fn(ctx): exactly one positional parameter without a default."""
    import inspect

    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return  # a builtin or C callable: let the call tell
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    takes_varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
    if not (len(required) == 1 and required[0] in positional) and not (not required and (positional or takes_varargs)):
        shown = ", ".join(p.name for p in params) or "nothing"
        raise ConfigError(file, "trainer", f"{ref} must take the trial context as its one argument, fit(ctx); it "
                                           f"takes ({shown})")


# The attributes a framework adapter sets on a training function (hf.trainer_fit's) or on itself (lightning.fit):
# ONE_DEVICE its name, when it trains a trial on one device only (checked against `devices` at validation); ADAPTER
# its table of what the framework does with each setting (integrations/tables.py: validation refuses what it cannot
# apply, and objectives it can never report).
ONE_DEVICE = "autotune_one_device"
ADAPTER = "autotune_adapter"


def one_device_adapter(fn: Any) -> str | None:
    """The adapter that trains `fn`'s trials on one device: `fn` made by it (marked), or one `fn`'s code calls by a
    name it reads (`tune_lightning.fit(...)`, an imported `fit`). An adapter reached through another function of the
    user's is not seen here: the adapter refuses several devices when it runs."""
    found = adapter_mark(fn, ONE_DEVICE)
    return found if isinstance(found, str) else None


def adapter_mark(fn: Any, attr: str = ADAPTER) -> Any:
    """What a framework adapter marked `fn` with (`attr`), or marked a function `fn`'s code calls by a name it
    reads; None when no adapter is seen."""
    if _marked(fn, attr) is not None:
        return _marked(fn, attr)
    code, names = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if code is None or not isinstance(names, dict):
        return None
    read: set[str] = set()
    todo = [code]
    while todo:  # (the names of nested functions and comprehensions too)
        c = todo.pop()
        read.update(c.co_names)
        todo.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    for name in read & set(names):
        obj = names[name]
        found = [obj, *(vars(obj).get(n) for n in read)] if isinstance(obj, type(os)) else [obj]
        for o in found:
            if _marked(o, attr) is not None:
                return _marked(o, attr)
    return None


def _marked(obj: Any, attr: str) -> Any:
    try:  # (any object a user's module holds: one whose __getattr__ raises is not an adapter)
        return getattr(obj, attr, None)
    except Exception:
        return None


def code_where(fn: Any) -> str:
    """`file.py:LINE in name` where a user's function is defined ('' for a callable without Python code): the
    place an error about what the function did as a whole (returned, never reported) points at."""
    code = getattr(fn, "__code__", None) or getattr(type(fn).__dict__.get("__call__"), "__code__", None)
    if code is None or library_file(code.co_filename):  # (the built-in trainer is not the user's)
        return ""
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno} in {code.co_name}"


# A framework a user's module imports -> the extra that installs it (pyproject.toml's optional dependencies).
# Folders a user's module was imported from that are not on sys.path: processes started to run the user's code
# (DDP ranks) import it by name, so they get these on their path (`importable`); this process's sys.path does not.
_FOLDERS: list[str] = []

# sys.argv while the last user module `load_factory` imported was imported (`[its file]`; empty before any).
_ARGV0: list[str] = []

# Inside `without_user_code()`: a read-only command (report, best, dashboard), which never imports or calls the code a
# run file or a study names (whoever can write a shared study could make it run theirs on the reader's machine).
_READ_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("autotune_read_only", default=False)


@contextlib.contextmanager
def without_user_code() -> Iterator[None]:
    """For the block, no user code is imported: the checks that import it are skipped (user_code_allowed), and a
    `load_factory` reached anyway is an AutotuneError, never an import."""
    token = _READ_ONLY.set(True)
    try:
        yield
    finally:
        _READ_ONLY.reset(token)


def user_code_allowed() -> bool:
    return not _READ_ONLY.get()


def file_stem(name: str, limit: int = 100) -> str:
    """A name (a study's, which anyone who can write the storage chooses) as a safe file name stem: letters, digits,
    `.`, `-` and `_` kept, anything else (`/`, `..` at the start, spaces, control characters) turned into `_`; never
    empty, never hidden, at most `limit` characters."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:limit].lstrip(".") or "study"
    return stem


def load_factory(ref: str, file: str = "<config>", key: str = "factory", near: str | None = None) -> Any:
    """Import `package.module:function`; a failure is a ConfigError naming the reference. Modules are found
    on the import path, in the working directory, and (`near`: the config file's path) next to the YAML file:
    those two are on sys.path only while the module is imported (it stays in sys.modules)."""
    if not user_code_allowed():
        from autotune.core.errors import AutotuneError

        raise AutotuneError(f"{file}: {key}: {ref} is not imported by a read-only command (report, best, dashboard)")
    mod_name, sep, attr = ref.partition(":")
    if not sep or not mod_name or not attr:
        raise ConfigError(file, key, f"must look like 'package.module:function'; got {ref!r}")
    extra = []
    if "" not in sys.path:  # a user's own module in the working directory
        extra.append(os.getcwd())
    if near is not None and near != "<config>":
        extra.append(str(Path(near).resolve().parent))
    try:
        with _on_path(extra) as added, _own_argv(mod_name) as argv0:
            module = importlib.import_module(mod_name)
    except SystemExit as e:  # (a script that parses its command line at import and found it wanting)
        raise ConfigError(file, key, f"importing {mod_name!r} ended the process (exit status {e.code}): "
                                     f"{os.path.basename(argv0[0])} parses its command line at import, and while "
                                     f"autotune imports it that holds no arguments: give each argument a default, "
                                     f"or parse inside `if __name__ == '__main__':`") from None
    except ConfigError as e:  # (autotune's own, from the module's imports: a missing extra)
        raise ConfigError(file, key, e.message) from None
    except Exception as e:  # ImportError, or the user's module raising on import
        missing = (getattr(e, "name", None) or "").partition(".")[0] if isinstance(e, ImportError) else ""
        if missing in EXTRAS:
            raise ConfigError(file, key, f"cannot import {mod_name!r}: it needs {missing}, which is not installed: "
                                         f"pip install 'autotune[{EXTRAS[missing]}]'") from None
        raise ConfigError(file, key, f"cannot import {mod_name!r}: {describe_exception(e)}") from None
    _FOLDERS.extend(f for f in added if f not in _FOLDERS)
    _ARGV0[:] = argv0  # (processes that import it by name see the same command line: `as_imported`)
    fn = module.__dict__.get(attr)
    if fn is None or not callable(fn):
        raise ConfigError(file, key, f"module {mod_name!r} has no callable {attr!r}")
    return fn


@contextlib.contextmanager
def _own_argv(mod_name: str) -> Iterator[list[str]]:
    """While the user's module is imported, `sys.argv` is `[<its file>]`: a script that parses its command line at
    import (`args = parser.parse_args()`, pytorch/examples' pattern) sees its own defaults, not autotune's command
    line, and its usage names its file. Restored after. Yields the argv it saw."""
    try:
        spec = importlib.util.find_spec(mod_name)
        origin = spec.origin if spec is not None and spec.origin else mod_name
    except Exception:  # (a parent package that fails to import: the import itself reports it)
        origin = mod_name
    saved = sys.argv
    sys.argv = [origin]  # (a new list: a module that keeps a reference to it keeps what it saw)
    try:
        yield [origin]
    finally:
        sys.argv = saved


@contextlib.contextmanager
def _on_path(folders: list[str]) -> Iterator[list[str]]:
    """`folders` not on sys.path yet are appended for the block, then taken out again (only those: a module that
    edits sys.path while it is imported keeps its own changes). Yields the ones it added."""
    added = [f for f in dict.fromkeys(folders) if f not in sys.path]
    sys.path.extend(added)
    try:
        yield added
    finally:
        for f in added:
            if f in sys.path:
                sys.path.remove(f)


@contextlib.contextmanager
def importable() -> Iterator[None]:
    """While processes that import the user's modules by name are started (multiprocessing hands them this
    process's sys.path): the folders `load_factory` found them in are on sys.path. (Their sys.argv stays this
    process's: the main script a new process runs again sees its own command line; the user's module is imported
    there under `module_argv`, as `as_imported` sets it.)"""
    with _on_path(_FOLDERS):
        yield


def module_argv() -> list[str]:
    """sys.argv as the last user module `load_factory` imported saw it (`[its file]`; empty before any)."""
    return list(_ARGV0)


@contextlib.contextmanager
def as_imported(argv: list[str]) -> Iterator[None]:
    """In a new process (a DDP rank), while the user's module is imported by name: sys.argv is `argv` (the
    `module_argv` of the process that started it, where that is known), so a script that parses its arguments at
    import sees its own defaults there too. Restored after."""
    saved = sys.argv
    if argv:
        sys.argv = list(argv)
    try:
        yield
    finally:
        sys.argv = saved


def resolve_path(p: str, source: str) -> Path:
    """Relative data paths are tried as given (cwd), then next to the config file."""
    path = Path(p)
    if path.is_absolute() or path.exists() or source == "<config>":
        return path
    return Path(source).parent / path
