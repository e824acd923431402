"""A training function of the user's (`trainer:`): its signature, user metrics and parameters, what a framework
adapter can apply, and the built-in trainer's own steps it cannot."""

from __future__ import annotations

from typing import Any

from autotune.core import (
    ConfigError,
    adapter_mark,
    check_fit_signature,
    load_factory,
    one_device_adapter,
    one_of,
    suggest,
    user_code_allowed,
)
from autotune.spec import BUILTIN_ONLY, CLOCKS, DIRECTIONS, INFERENCE, SETTINGS, USER_PREFIX, RunConfig


def check_user_training(cfg: RunConfig, file: str) -> None:
    """`trainer:` imports and takes a context; user metrics need a direction; user parameters need a trainer."""
    for i, o in enumerate(cfg.objectives):
        if o.metric in DIRECTIONS:
            continue
        if cfg.trainer is None:
            raise ConfigError(file, f"objectives.{i}.metric",
                              f"unknown metric {o.metric!r}{suggest(o.metric, DIRECTIONS)}; {one_of(DIRECTIONS)} "
                              "(a training function, `trainer:`, may report others)")
        if o.direction is None:
            raise ConfigError(file, f"objectives.{i}.direction", f"{o.metric} is not a built-in metric "
                                                                 f"({', '.join(DIRECTIONS)}): give its direction, "
                                                                 "maximize or minimize")
    for i, m in enumerate(cfg.metrics):
        if m in CLOCKS or not m.isidentifier():
            raise ConfigError(file, f"metrics.{i}", f"{m!r}: a metric name is a Python identifier and not one of "
                                                    f"the clocks autotune measures ({', '.join(CLOCKS)})")
    user = [f"train.{k}" for k in cfg.train if k.startswith(USER_PREFIX)] + \
        [f"space.{k}" for k in cfg.space if k.startswith(USER_PREFIX)]
    if user and cfg.trainer is None:
        raise ConfigError(file, user[0], "user parameters go to a training function (trainer: package.module:fit); "
                                         "this file uses the built-in trainer")
    for key in user:
        name = key.split(".", 2)[2]
        if name in SETTINGS:
            raise ConfigError(file, key, f"{name!r} is a trainer setting: use it as {name} (ctx.params[{name!r}] "
                                         "holds it), or rename the user parameter")
    if cfg.trainer is not None and user_code_allowed():
        fn = load_factory(cfg.trainer, file, "trainer", near=cfg.source)
        check_fit_signature(fn, cfg.trainer, file)
        check_one_device(cfg, fn, file)
        _check_builtin_only(cfg, file)
        check_framework(cfg, fn, file)


def check_framework(cfg: RunConfig, fn: Any, file: str | None) -> None:
    """A training function through a framework adapter (the HF Trainer, Lightning): every setting the study
    chooses (searched, or fixed in train:) is one the framework can apply, with values it can take, and every
    objective and metric one it can report (HF's eval_X is val_X); else one line naming the key."""
    table = adapter_mark(fn)
    if table is None or not hasattr(table, "refusal"):
        return
    chosen: list[tuple[str, str, list[Any] | None]] = [(f"train.{k}", k, [v]) for k, v in cfg.train.items()]
    for key, spec in cfg.space.items():
        chosen.append((f"space.{key}", key, list(spec.choices) if spec.choices is not None else None))
    keys = {key for _, key, _ in chosen}
    for where, key, values in chosen:
        if key in SETTINGS:
            why = table.refusal(key, values, keys)
            if why is not None:
                raise ConfigError(file, where, why)
    named = [(f"objectives.{i}.metric", o.metric) for i, o in enumerate(cfg.objectives)]
    for where, metric in named + [(f"metrics.{i}", m) for i, m in enumerate(cfg.metrics)]:
        why = table.metric_refusal(metric)
        if why is not None:
            raise ConfigError(file, where, why)


def check_one_device(cfg: RunConfig, fn: Any, file: str | None) -> None:
    """A training function through a framework adapter that trains a trial on one device (the HF Trainer, Lightning)
    with `devices` above 1, fixed or searched: refused before any trial runs."""
    spec = cfg.space.get("devices")
    if spec is None:
        values, where = [cfg.train.get("devices", SETTINGS["devices"].default)], "train.devices"
    else:
        values = list(spec.choices) if spec.choices is not None else [spec.low, spec.high]
        where = "space.devices"
    if all(int(v) <= 1 for v in values if v is not None):
        return
    adapter = one_device_adapter(fn)
    if adapter is not None:
        raise ConfigError(file, where, f"{adapter} trains a trial on one device; allowed: 1 (got "
                                       f"{', '.join(str(v) for v in values if v is not None)})")


# Metrics measured on the built-in trainer's model, which a user's training function does not expose.
BUILTIN_ONLY_METRICS = INFERENCE


def _check_builtin_only(cfg: RunConfig, file: str) -> None:
    """The built-in trainer's own steps (spec.BUILTIN_ONLY: compression, inference metrics, checkpoint loading),
    searched or fixed away from their default, with a training function of the user's."""
    for key in BUILTIN_ONLY:
        where = f"space.{key}" if key in cfg.space else f"train.{key}" if key in cfg.train else None
        if where is not None and (key in cfg.space or cfg.train[key] != SETTINGS[key].default):
            raise ConfigError(file, where, f"{key}: compression and transfer learning run on the built-in trainer's "
                                           "model (its inference measurements too); with trainer: they are not "
                                           "applied (drop the key)")
    for i, o in enumerate(cfg.objectives):
        if o.metric in BUILTIN_ONLY_METRICS:
            raise ConfigError(file, f"objectives.{i}.metric", f"{o.metric} is measured on the built-in trainer's "
                                                              "model; with trainer: report your own metric instead")
    if cfg.distill is not None:
        raise ConfigError(file, "distill", "distillation runs in the built-in trainer's loss; with trainer: distill "
                                           "in your own loss function")
