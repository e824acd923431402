"""Whose code a worker runs: the code a study's stored config names (`trainer:`, `data.factory`, `model.factory`)
runs on every machine that joins the study, and anyone who can write the storage (a lab's PostgreSQL user, an
unauthenticated gRPC proxy, a group-writable journal) could change what it names. So a worker runs stored code
only when the stored config is the one that was launched, known by its hash (`code_hash`: the stored config and its
run file's path; `autotune run` and `autotune launch` print it, and launch's jobs are given it), or when told to
trust the storage (`--trust-stored-code`). A study whose config names no code of the user's (the built-in trainer
on a named dataset) needs neither. Read-only commands (report, best, dashboard) never import stored code at all
(core.without_user_code).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import optuna

from autotune.core import ConfigError, redact
from autotune.spec import StudyRecord

HASH_ENV = "AUTOTUNE_CODE_HASH"  # what `autotune worker --code-hash` reads when not given (a Kubernetes Secret...)
CODE_KEYS = (("trainer",), ("data", "factory"), ("model", "factory"), ("distill", "teacher_model", "factory"))


def code_refs(raw: Any) -> list[str]:
    """The user code a stored config names, as `key: package.module:function` (empty: none)."""
    out = []
    for path in CODE_KEYS:
        node = raw
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node:
            out.append(f"{'.'.join(path)}: {node}")
    return out


def code_hash(raw: Any, source: str) -> str:
    """The hash of a stored config and its run file's path (16 hex digits): what a worker compares."""
    text = json.dumps({"config": raw, "source": source}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stored(study: optuna.Study) -> tuple[Any, str]:
    """(the config a study stores, the path of the run file it came from)."""
    record = StudyRecord.of(study)
    return record.config, str(record.source if record.source is not None else "<config>")


def study_hash(study: optuna.Study) -> str | None:
    """The study's code hash, where its stored config names user code (None: no code of the user's to vouch for)."""
    raw, source = stored(study)
    return code_hash(raw, source) if code_refs(raw) else None


def check(name: str, raw: Any, source: str, expected: str | None, trust: bool, url: str) -> None:
    """Before a worker imports anything study `name` names: its stored config (`raw` and `source`, as read once: the
    caller runs these very bytes, never a second read a writer could have changed) is the one launched (`expected`,
    the hash given), or the caller trusts the storage; else one ConfigError line and nothing is run."""
    refs = code_refs(raw)
    if not refs or trust:
        return
    if expected is None:
        raise ConfigError("--study", "--code-hash", f"study {name!r} in {redact(url)} runs code its stored config "
                                                    f"names ({'; '.join(refs)}): a worker runs it only when it is "
                                                    "what was launched; pass the --code-hash that `autotune run` or "
                                                    "`autotune launch` printed for it (or $" + HASH_ENV + "), or "
                                                    "--trust-stored-code if you trust everyone who can write this "
                                                    "storage")
    if code_hash(raw, source) != expected.strip():
        raise ConfigError("--study", "--code-hash", f"study {name!r} in {redact(url)}: its stored config is not the "
                                                    f"one launched (its code hash is not {expected.strip()}): it was "
                                                    f"changed since, so the code it names ({'; '.join(refs)}) is not "
                                                    "run (--trust-stored-code runs it anyway)")


def join_line(study: optuna.Study, url_shown: str) -> str | None:
    """How another machine joins this study, with its code hash (None: its config names no user code)."""
    h = study_hash(study)
    if h is None:
        return None
    return f"autotune worker --storage {url_shown} --study {study.study_name} --code-hash {h}"


__all__ = ["CODE_KEYS", "HASH_ENV", "check", "code_hash", "code_refs", "join_line", "stored", "study_hash"]
