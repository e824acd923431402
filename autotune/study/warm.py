"""Warm starts: a new study begins with the best configurations of an earlier one.

`study.warm_start: {storage: URL, study: NAME, top_k: N}` (storage defaults to this study's): when the
study is created, the earlier study's `top_k` best completed trials are enqueued, in order, so they are
its first trials; the sampler proposes the rest. "Best" is Pareto rank first (non-dominated, then the
next front...), then the first objective. Each configuration is checked against the current space: a
value outside it (a choice no longer offered, a number outside the range) skips that configuration, with
a note; a parameter the current space does not search is left out (the config's value is used), and one
it searches that the earlier trial lacked is sampled.
"""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core import ConfigError
from autotune.search import feasible, space
from autotune.spec import ParamSpec, RunConfig, StudyRecord, TrialRecord
from autotune.study import records
from autotune.study.storage import find_study, make_storage

ATTR = "warm_start"  # the stored key of TrialRecord.warm_start (and of the study's notes): "STUDY#NUMBER"


def source(cfg: RunConfig) -> optuna.Study | None:
    """The earlier study (None without warm_start); a missing study or storage is a ConfigError, before anything
    is written."""
    ws = cfg.study.warm_start
    if ws is None:
        return None
    url = ws.storage or cfg.study.storage
    probe = cfg.model_copy(update={"study": cfg.study.model_copy(update={"storage": url, "warm_start": None,
                                                                         "name": ws.study})})
    try:
        storage = make_storage(probe, read_only=True, create=False)  # (a missing file is made by nothing here)
    except ConfigError as e:
        raise ConfigError(e.file, "study.warm_start.storage", e.message) from None
    return find_study(storage, url, ws.study, cfg.file, "study.warm_start.study")


def best(study: optuna.Study, k: int) -> list[FrozenTrial]:
    """The k best completed trials: feasible ones first, then by Pareto rank, then by the first objective."""
    from autotune.search import nondominated_ranks

    dirs = [d.name.lower() for d in study.directions]
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.values is not None and all(math.isfinite(v) for v in t.values)]
    if not done:
        return []
    ranks = nondominated_ranks([list(t.values) for t in done], dirs)
    sign = -1.0 if dirs[0] == "maximize" else 1.0
    order = sorted(range(len(done)), key=lambda i: (not feasible(done[i]), ranks[i],
                                                    sign * done[i].values[0], done[i].number))
    return [done[i] for i in order[:k]]


def fits(spec: ParamSpec, value: Any) -> bool:
    """Is a stored parameter value one the current spec can take?"""
    if spec.choices is not None:
        return value in space.choices(spec)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    assert spec.low is not None and spec.high is not None
    if not spec.low <= value <= spec.high:
        return False
    if spec.type == "int" and value != int(value):
        return False
    if spec.step:
        k = (value - spec.low) / spec.step
        return abs(k - round(k)) < 1e-9
    return True


def enqueue(study: optuna.Study, cfg: RunConfig, src: optuna.Study) -> list[str]:
    """Enqueue src's best configurations that fit cfg's space; returns one note per thing left out."""
    ws = cfg.study.warm_start
    assert ws is not None
    notes: list[str] = []
    dropped: set[str] = set()
    queued: list[int] = []
    for t in best(src, ws.top_k):
        params: dict[str, Any] = {}
        bad = None
        for name, value in t.params.items():
            spec = cfg.space.get(name)
            if spec is None:
                dropped.add(name)
                continue
            if not fits(spec, value):
                bad = f"{name} {value!r}"
                break
            params[name] = value
        if bad is not None:
            notes.append(f"warm start: {ws.study} trial {t.number} skipped: {bad} is outside space.{bad.split()[0]}")
            continue
        study.enqueue_trial(params, user_attrs=TrialRecord(warm_start=f"{ws.study}#{t.number}").attrs())
        queued.append(t.number)
    if dropped:
        notes.append(f"warm start: {', '.join(sorted(dropped))} not searched here: this config's value is used")
    found = len(best(src, ws.top_k))
    notes.insert(0, f"warm start: {len(queued)} of {ws.study}'s {found} best trial(s) queued first"
                    + (f" (trials {', '.join(map(str, queued))})" if queued else ""))
    records.write_study(study, StudyRecord(warm_start={"study": ws.study, "trials": queued, "notes": notes[1:]}))
    return notes


__all__ = ["ATTR", "best", "enqueue", "fits", "source"]
