"""Sizes at the edge: a run file (or a stored config a worker reads back) is refused in one line before anything
else looks at it when a value is too big to be sane. Everything in a config is stored with the study (its `config`
user attr) and, for parameters, with every trial, echoed in messages and used in file names: a 50 MB parameter was
stored three times, a 5 kB study name crashed `validate` on a file name and echoed itself into 52 MB of stderr, and
100,000 searched parameters passed `validate` and then ran for minutes before a first line. The limits are far
above any real run file; each message names the key path, the limit and how big the value was (never the value
itself past a short prefix).
"""

from __future__ import annotations

import json
from typing import Any

from autotune.core import ConfigError, shown

STUDY_NAME_BYTES = 200  # a study's name: file names (studies/<name>.db, reports) and database rows
KEY_CHARS = 200  # any key of any mapping
STRING_BYTES = 64 * 1024  # any string value (a parameter, a path, a reference)
ITEMS = 10_000  # entries of any list or mapping (the choices of one parameter, fixed user parameters)
SEARCHED = 1_000  # parameters in `space`: each is sampled, stored and shown for every trial
DEPTH = 64  # nesting of mappings and lists (yaml.MAX_DEPTH's, for a config that came from elsewhere)
STORED_BYTES = 1024 * 1024  # the whole config, as stored with the study
FILE_BYTES = 2 * 1024 * 1024  # a run file, refused before it is parsed


def check_bounds(raw: dict[str, Any], file: str) -> None:
    """Refuse (ConfigError: file, key path, limit) a raw config with a value over the limits above."""
    stack: list[tuple[Any, str, int]] = [(raw, "", 0)]
    while stack:  # (iterative: a deeply nested file meets DEPTH, not Python's recursion limit)
        node, path, depth = stack.pop()
        if depth > DEPTH:
            raise ConfigError(file, path, f"nested more than {DEPTH} levels deep")
        if isinstance(node, str):
            _check_string(node, path, file)
        elif isinstance(node, dict):
            _check_count(len(node), path, file, "keys")
            for key, value in node.items():
                if len(str(key)) > KEY_CHARS:
                    raise ConfigError(file, _join(path, shown(str(key), 40)),
                                      f"a key of {len(str(key)):,} characters; at most {KEY_CHARS}")
                stack.append((value, _join(path, str(key)), depth + 1))
        elif isinstance(node, (list, tuple)):
            _check_count(len(node), path, file, "items")
            stack.extend((value, f"{path}[{i}]", depth + 1) for i, value in enumerate(node))
    space = raw.get("space")
    if isinstance(space, dict) and len(space) > SEARCHED:
        raise ConfigError(file, "space", f"{len(space):,} searched parameters; at most {SEARCHED:,} (each is sampled, "
                                         "stored and shown for every trial): fix the ones that need no search in "
                                         "train")
    study = raw.get("study")
    name = study.get("name") if isinstance(study, dict) else None
    if isinstance(name, str) and len(name.encode()) > STUDY_NAME_BYTES:
        raise ConfigError(file, "study.name", f"a name of {len(name.encode()):,} bytes; at most {STUDY_NAME_BYTES} "
                                              f"(it names the study's files and rows); got {shown(name, 60)}")
    size = len(json.dumps(raw, default=str))
    if size > STORED_BYTES:
        raise ConfigError(file, "", f"the config is {size:,} bytes as stored with the study; at most "
                                    f"{STORED_BYTES:,}: read big data from a file your code opens")


def _check_string(value: str, path: str, file: str) -> None:
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > STRING_BYTES:
        raise ConfigError(file, path, f"a value of {size:,} bytes; at most {STRING_BYTES:,} (it is stored with the "
                                      "study and echoed in messages): read big data from a file your code opens; "
                                      f"got {shown(value, 60)}")


def _check_count(n: int, path: str, file: str, what: str) -> None:
    if n > ITEMS:
        raise ConfigError(file, path, f"{n:,} {what}; at most {ITEMS:,}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


__all__ = ["DEPTH", "FILE_BYTES", "ITEMS", "KEY_CHARS", "SEARCHED", "STORED_BYTES", "STRING_BYTES", "STUDY_NAME_BYTES",
           "check_bounds"]
