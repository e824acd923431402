"""A searched parameter's `when` conditions: known keys, values those keys can take, no cycle."""

from __future__ import annotations

from typing import Any

from autotune.core import ConfigError, shown, suggest, warn_config
from autotune.spec import SETTINGS, ParamSpec, RunConfig


def check_when(key: str, spec: ParamSpec, cfg: RunConfig, file: str) -> None:
    """Each condition names a known key and only values that key can take; one that can never hold (a fixed
    key's value is not among them) is a warning: the parameter is never sampled."""
    where = f"space.{key}"
    for dep, val in (spec.when or {}).items():
        if dep not in cfg.space and dep not in SETTINGS and dep not in cfg.train:
            raise ConfigError(file, f"{where}.when.{dep}", f"unknown setting{suggest(dep, SETTINGS)}")
        if dep == key:
            raise ConfigError(file, f"{where}.when", "a parameter cannot depend on itself")
        vals = val if isinstance(val, list) else [val]
        takes = _condition_values(dep, cfg, file, f"{where}.when.{dep}")
        for v in vals:
            if takes is not None and v not in takes:
                names = [str(c) for c in takes]
                raise ConfigError(file, f"{where}.when.{dep}", f"{shown(v)} is not among {dep}'s choices"
                                                               f"{suggest(str(v), names)}; allowed: "
                                                               f"{', '.join(names)}")
        if dep not in cfg.space:
            fixed = cfg.train[dep] if dep in cfg.train else cfg.fixed().get(dep)
            if fixed not in vals:
                warn_config(file, f"{where}.when.{dep}", f"can never hold: {dep} is not searched and is fixed at "
                                                         f"{shown(fixed)}, so {key} is never sampled (search {dep} "
                                                         f"or drop the condition)")


def _condition_values(dep: str, cfg: RunConfig, file: str, where: str) -> tuple[Any, ...] | None:
    """The values a condition on `dep` may name: a searched key's choices, a choice or bool setting's values
    (None: any value, a user parameter or a number fixed in train)."""
    if dep in cfg.space:
        choices = cfg.space[dep].choices
        if choices is None:
            raise ConfigError(file, where, f"{dep} must be categorical or bool to be a condition")
        return tuple(choices)
    setting = SETTINGS.get(dep)
    if setting is None:
        return None
    if setting.kind == "choice":
        return setting.choices
    return (False, True) if setting.kind == "bool" else None


def check_when_order(cfg: RunConfig, file: str) -> None:
    """`when` conditions must not form a cycle (sampling order is a topological order)."""
    seen: dict[str, int] = {}

    def visit(k: str, stack: tuple[str, ...]) -> None:
        if seen.get(k) == 2:
            return
        if k in stack:
            raise ConfigError(file, f"space.{k}.when", "conditions form a cycle: " + " -> ".join((*stack, k)))
        spec = cfg.space.get(k)
        for dep in (spec.when or {}) if spec else {}:
            if dep in cfg.space:
                visit(dep, (*stack, k))
        seen[k] = 2

    for k in cfg.space:
        visit(k, ())
