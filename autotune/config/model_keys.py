"""The model section and the searched `model.KEY` parameters: keys a model takes, values it accepts."""

from __future__ import annotations

from typing import Any

from autotune.config.conditions import check_when
from autotune.config.registered import model_names
from autotune.core import ConfigError, load_factory, resolve_path, suggest, unknown, user_code_allowed
from autotune.spec import MODEL_PREFIX, ModelConfig, ParamSpec, RunConfig


def check_model(cfg: RunConfig, file: str, source: str) -> None:
    m = cfg.model
    if m.factory is None and m.name is None:
        raise ConfigError(file, "model.name", f"give a model name ({', '.join(model_names())}) or model.factory")
    if m.factory is not None and user_code_allowed():
        load_factory(m.factory, file, "model.factory")
    for name in _model_names(cfg):
        _check_model_keys(m.model_copy(update={"name": name}), file, "model")
    if cfg.distill is not None and cfg.distill.teacher_model is not None:
        _check_model_keys(cfg.distill.teacher_model, file, "distill.teacher_model")
    if m.checkpoint is not None and not resolve_path(m.checkpoint, source).is_file():
        raise ConfigError(file, "model.checkpoint", f"no such file: {m.checkpoint}")


def _model_names(cfg: RunConfig, spec: ParamSpec | None = None) -> tuple[str | None, ...]:
    """The model names a trial can build: the model section's, or (space.model.name searched) its choices,
    those a `when: {model.name: ...}` of `spec` allows."""
    searched = cfg.space.get(MODEL_PREFIX + "name")
    if searched is None or cfg.model.factory is not None:
        return (cfg.model.name,)
    names = tuple(str(c) for c in searched.choices or ())
    want = (spec.when or {}).get(MODEL_PREFIX + "name") if spec is not None else None
    if want is None:
        return names
    allowed = want if isinstance(want, list) else [want]
    return tuple(n for n in names if n in allowed)


def _model_takes(m: ModelConfig, file: str, where: str) -> tuple[str, ...] | None:
    """The keys a model takes (None: any keyword: a factory with **kwargs)."""
    from autotune.training import models

    if m.factory is not None:
        return models.factory_keys(load_factory(m.factory, file, f"{where}.factory")) if user_code_allowed() else None
    return models.model_keys(str(m.name))


def _check_model_keys(m: ModelConfig, file: str, where: str) -> None:
    """Fixed architecture keys of a named model: each one it takes, with a value it accepts. (A factory
    is offered the keys its signature takes, as it is offered input_shape and dropout.)"""
    from autotune.training import models

    if m.factory is not None:
        return
    takes = models.model_keys(str(m.name))
    fields = m.model_dump()
    if m.name in ("torchvision", "timm") and fields["arch"] is None:
        lister = "torchvision.models.list_models()" if m.name == "torchvision" else "timm.list_models()"
        raise ConfigError(file, f"{where}.arch", f"{m.name} needs an arch, e.g. resnet18 (a name from {lister})")
    for key in models.MODEL_KEYS:
        value = fields[key]
        if value is None:
            continue
        if key not in takes:
            raise ConfigError(file, f"{where}.{key}", f"{m.name} does not take {key}; it takes {', '.join(takes)}")
        why = models.check_value(m.name, key, value)
        if why is not None:
            raise ConfigError(file, f"{where}.{key}", why)
    if m.name in ("torchvision", "timm"):
        bad = sorted(set(models.NO_DOWNLOAD) & set(m.kwargs))
        if bad:
            raise ConfigError(file, f"{where}.kwargs.{bad[0]}", "autotune never downloads weights; give a local "
                                                                 "state dict as model.checkpoint")


def check_model_spec(key: str, spec: ParamSpec, cfg: RunConfig, file: str) -> None:
    """`space: {model.KEY: ...}`: a key the model takes, never also fixed, every value one it accepts."""
    where = f"space.{MODEL_PREFIX}{key}"
    if cfg.trainer is not None:
        raise ConfigError(file, where, "model keys search the built-in model's architecture; a training function "
                                       "(trainer:) builds its own model: search a user parameter (user.NAME)")
    check_when(MODEL_PREFIX + key, spec, cfg, file)
    if key == "name":
        return _check_model_name_spec(spec, cfg, file, where)
    searched = MODEL_PREFIX + "name" in cfg.space
    for name in _model_names(cfg, spec):
        _check_model_spec_for(key, spec, cfg.model.model_copy(update={"name": name}), file, where, searched)


def _check_model_name_spec(spec: ParamSpec, cfg: RunConfig, file: str, where: str) -> None:
    """`space: {model.name: {type: categorical, choices: [mlp, cnn1d]}}`: the architecture itself searched."""
    m = cfg.model
    if m.factory is not None:
        raise ConfigError(file, where, "searches the built-in models' names; drop model.factory to use it")
    if "name" in m.model_fields_set:
        raise ConfigError(file, where, "is both fixed in model and searched in space; keep one")
    if m.checkpoint is not None:
        raise ConfigError(file, where, "a searched architecture cannot warm-start from model.checkpoint (one "
                                       "checkpoint fits one architecture); fix the key or drop the checkpoint")
    if spec.type != "categorical":
        raise ConfigError(file, f"{where}.type", "model.name takes a model name: use type categorical")
    for c in spec.choices or ():
        if c not in model_names():
            raise ConfigError(file, f"{where}.choices", unknown("model", c, model_names()))


def _check_model_spec_for(key: str, spec: ParamSpec, m: ModelConfig, file: str, where: str,
                          searched: bool) -> None:
    """One model.KEY parameter against one model (`searched`: model.name is searched too, so a key only some
    of the names take needs a `when` on model.name)."""
    from autotune.training import models

    takes = _model_takes(m, file, "model")
    label = m.name or m.factory
    if m.factory is None and key not in models.MODEL_KEYS:
        raise ConfigError(file, where, f"unknown model key{suggest(key, models.MODEL_KEYS)}; "
                                       f"{label} takes {', '.join(takes or ())}")
    if takes is not None and key not in takes:
        hint = " (search it only for the models that take it: when: {model.name: [...]})" if searched else ""
        raise ConfigError(file, where, f"{label} does not take {key}; it takes "
                                       f"{', '.join(takes) or 'no architecture keys'}{hint}")
    if key in models.MODEL_KEYS and m.model_dump()[key] is not None:
        raise ConfigError(file, where, "is both fixed in model and searched in space; keep one")
    if m.checkpoint is not None:
        raise ConfigError(file, where, "a searched architecture cannot warm-start from model.checkpoint (one "
                                       "checkpoint fits one architecture); fix the key or drop the checkpoint")
    if m.factory is not None:
        return  # a factory's own argument: whatever it accepts
    _check_model_spec_values(key, spec, m, file, where)


def _check_model_spec_values(key: str, spec: ParamSpec, m: ModelConfig, file: str, where: str) -> None:
    """A built-in model's searched key: a type that can give its values, and every value one the model accepts."""
    from autotune.training import models

    if spec.type in ("float", "bool") or (spec.type == "int" and key in ("channels", "arch")):
        use = "categorical" if key in ("channels", "arch") else "int or categorical"
        raise ConfigError(file, f"{where}.type", f"model key {key} takes {models.KEY_RULES[key]}: use type {use}")
    if spec.type == "int":
        assert spec.low is not None and spec.high is not None  # checked by ParamSpec
        step = int(spec.step or 1)
        values: list[Any] = list(range(int(spec.low), int(spec.high) + 1, step))
        if len(values) > 10_000:
            values = [int(spec.low), int(spec.high)]
        for v in values:
            why = models.check_value(m.name, key, v)
            if why is not None:
                bound = "low" if v == values[0] else "high" if v == values[-1] else "step"
                raise ConfigError(file, f"{where}.{bound}", why + (
                    "; use type categorical with the allowed values" if bound == "step" or key == "depth" else ""))
        return
    for c in spec.choices or ():
        why = models.check_value(m.name, key, list(c) if isinstance(c, (list, tuple)) else c)
        if why is not None:
            raise ConfigError(file, f"{where}.choices", why)
