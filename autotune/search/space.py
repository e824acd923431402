"""Search-space parameters and `sample(trial) -> settings`: the only caller of `trial.suggest_*`.

A parameter with `when: {optimizer: sgd}` is sampled only in trials where that
condition holds; elsewhere the setting keeps its fixed value (so TPE never sees a
meaningless momentum for Adam).

Besides trainer settings, `space:` may hold prefixed keys: `model.KEY` searches a key of the model
section (`models.build_for` applies them). They come back in the same settings dict, under their
prefixed names. A categorical choice that is a list (e.g. `model.channels: [[16, 32], [32, 64]]`)
is offered to Optuna as its JSON text (Optuna's choices are scalars) and returned as the list.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from autotune.spec import MODEL_PREFIX, SETTINGS, USER_PREFIX, ParamSpec, RunConfig, merge


def order(space: dict[str, ParamSpec]) -> list[str]:
    """Parameters in an order where each comes after the ones its `when` names (stable otherwise)."""
    done: list[str] = []

    def visit(k: str) -> None:
        if k in done:
            return
        for dep in space[k].when or {}:
            if dep in space:
                visit(dep)
        done.append(k)

    for k in space:
        visit(k)
    return done


def active(spec: ParamSpec, values: dict[str, Any]) -> bool:
    """Does this parameter's `when` hold for the values chosen so far?"""
    for dep, want in (spec.when or {}).items():
        allowed = want if isinstance(want, list) else [want]
        if values.get(dep) not in allowed:
            return False
    return True


def _encode(choice: Any) -> Any:
    return json.dumps(list(choice)) if isinstance(choice, (list, tuple)) else choice


def choices(spec: ParamSpec) -> list[Any]:
    """A categorical parameter's choices as Optuna stores them (lists as JSON text)."""
    return [_encode(c) for c in spec.choices or ()]


def decode(spec: ParamSpec, value: Any) -> Any:
    """A stored parameter value as the setting takes it (JSON text of a list choice back to the list)."""
    if isinstance(value, str) and any(isinstance(c, (list, tuple)) for c in spec.choices or ()):
        return json.loads(value)
    return value


def distribution(spec: ParamSpec) -> BaseDistribution:
    """The distribution Optuna samples this parameter from (`suggest` asks for exactly this one)."""
    if spec.type == "float":
        assert spec.low is not None and spec.high is not None  # checked by config
        return FloatDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
    if spec.type == "int":
        assert spec.low is not None and spec.high is not None
        return IntDistribution(int(spec.low), int(spec.high), log=spec.log, step=int(spec.step) if spec.step else 1)
    return CategoricalDistribution(choices(spec))


def suggest(trial: optuna.Trial, name: str, spec: ParamSpec) -> Any:
    d = distribution(spec)
    if isinstance(d, FloatDistribution):
        return trial.suggest_float(name, d.low, d.high, log=d.log, step=d.step)
    if isinstance(d, IntDistribution):
        return trial.suggest_int(name, d.low, d.high, log=d.log, step=d.step)
    value = trial.suggest_categorical(name, choices(spec))
    return decode(spec, value.item() if isinstance(value, np.generic) else value)


def inactive_value(name: str, cfg: RunConfig) -> tuple[bool, Any]:
    """(keep?, value) for a parameter whose `when` does not hold: a trainer setting keeps its default;
    `model.KEY` keeps the model section's value if it sets one; a user parameter is left out."""
    if name.startswith(USER_PREFIX):
        return False, None
    if name.startswith(MODEL_PREFIX):
        value = cfg.model.model_dump().get(name[len(MODEL_PREFIX):])
        return value is not None, list(value) if isinstance(value, tuple) else value
    return True, SETTINGS[name].default


def walk(cfg: RunConfig, pick: Callable[[str, ParamSpec], Any]) -> dict[str, Any]:
    """One value per parameter, in dependency order: `pick(name, spec)`'s where its `when` holds given the values
    before it, the fixed value where it does not (`inactive_value`)."""
    base = merge(cfg.train)
    chosen: dict[str, Any] = {}
    for name in order(cfg.space):
        spec = cfg.space[name]
        if active(spec, {**base, **chosen}):
            chosen[name] = pick(name, spec)
        else:
            keep, value = inactive_value(name, cfg)
            if keep:
                chosen[name] = value
    return chosen


def sample(trial: optuna.Trial, cfg: RunConfig) -> dict[str, Any]:
    """All trainer settings for this trial: the fixed ones plus one value per active parameter
    (searched model keys under their `model.` names, user parameters under `user.`). An inactive
    parameter keeps its fixed value (`inactive_value`)."""
    return merge(cfg.train, walk(cfg, lambda name, spec: suggest(trial, name, spec)))


def split(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(trainer settings, user parameters by their bare names) of a sampled or fixed point."""
    settings = {k: v for k, v in values.items() if not k.startswith(USER_PREFIX)}
    user = {k[len(USER_PREFIX):]: v for k, v in values.items() if k.startswith(USER_PREFIX)}
    return settings, user


def grid(cfg: RunConfig) -> dict[str, list[Any]]:
    """The search space as Optuna's GridSampler wants it (config has checked every param is discrete)."""
    out: dict[str, list[Any]] = {}
    for name, spec in cfg.space.items():
        if spec.choices is not None:
            out[name] = choices(spec)
        else:
            assert spec.low is not None and spec.high is not None and spec.step is not None
            out[name] = [v.item() for v in np.arange(spec.low, spec.high + spec.step / 2, spec.step)]
            if spec.type == "int":
                out[name] = [int(v) for v in out[name]]
    return out


def fixed_point(cfg: RunConfig, params: dict[str, Any]) -> dict[str, Any]:
    """Settings for given parameter values (used by `autotune.train` and `best --export`); `params`
    as a trial stores them (list choices as JSON text) or as the settings take them."""
    params = {k: decode(cfg.space[k], v) if k in cfg.space else v for k, v in params.items()}
    base = merge(cfg.train)
    chosen: dict[str, Any] = {}
    for name in order(cfg.space):
        spec = cfg.space[name]
        if name in params:
            chosen[name] = params[name]
        elif active(spec, {**base, **chosen}):
            chosen[name] = _middle(spec)
        else:
            keep, value = inactive_value(name, cfg)
            if keep:
                chosen[name] = value
    return merge(cfg.train, chosen, params)


def _middle(spec: ParamSpec) -> Any:
    """A parameter's value where none is given: its first choice, or the middle of its range (log: geometric)."""
    if spec.choices is not None:
        return decode(spec, choices(spec)[0])
    assert spec.low is not None and spec.high is not None
    mid = float(np.sqrt(spec.low * spec.high)) if spec.log else (spec.low + spec.high) / 2
    return int(round(mid)) if spec.type == "int" else mid


def of_trial(cfg: RunConfig, stored: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A finished trial's settings: as it stored them (over today's defaults: a key added since keeps its default),
    else rebuilt from its parameters."""
    return merge(cfg.train, stored) if stored else fixed_point(cfg, params)
