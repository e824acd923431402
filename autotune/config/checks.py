"""The rules of a run file that span fields or need a registry's names, run once by `load`/`from_dict`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from autotune.core import (
    AutotuneError,
    ConfigError,
    adapter_mark,
    check_fit_signature,
    load_factory,
    one_device_adapter,
    one_of,
    resolve_path,
    shown,
    suggest,
    unknown,
    user_code_allowed,
    warn_config,
)
from autotune.spec import (
    BUILTIN_ONLY,
    CLOCKS,
    DIRECTIONS,
    INFERENCE,
    MODEL_PREFIX,
    SETTINGS,
    TASK_METRICS,
    USER_PREFIX,
    ModelConfig,
    ParamSpec,
    RunConfig,
)

# ---------------------------------------------------------------- names from the registries
# Each registry is a mapping next to its builders (samplers.py, pruners.py, data/registry.py, models.py). Those modules
# import this one, so their names are read when a config is validated, never copied here.


def sampler_names() -> list[str]:
    from autotune.search import SAMPLERS

    return list(SAMPLERS)


def sampler_kind(name: str) -> Any:
    """What a registered sampler can do (search.SamplerKind: objectives, proposes, grid); None: not registered."""
    from autotune.search import SAMPLERS

    return SAMPLERS.get(name)


def pruner_names(objectives: str | None = None) -> list[str]:
    """Registered pruners (`auto` first); `objectives` one or several: those a study with that many can use."""
    from autotune.search import PRUNERS

    if objectives is None:
        return ["auto", *PRUNERS]
    return [n for n, kind in PRUNERS.items() if kind.objectives in (objectives, "any")]


def dataset_names() -> list[str]:
    from autotune.training import DATASETS

    return list(DATASETS)


def dataset_task(name: str) -> str | None:
    """The task a built-in dataset's labels are for (None: either, the file decides)."""
    from autotune.training import DATASETS

    return DATASETS[name].task


def model_names() -> list[str]:
    from autotune.training import MODELS

    return list(MODELS)


def _check_semantics(cfg: RunConfig, file: str, source: str) -> RunConfig:
    """Rules that span fields, in this order (the first broken one is the message): settings values,
    fixed-vs-searched, `when`, task, objectives, user training, sampler and pruner fit, data, model. Then
    the defaults that depend on other fields (study name, storage, MLflow)."""
    _check_train_values(cfg, file)
    _check_space(cfg, file)
    _check_when_order(cfg, file)
    _check_task(cfg, file)
    metrics = [o.metric for o in cfg.objectives]
    if len(set(metrics)) != len(metrics):
        raise ConfigError(file, "objectives", f"each metric may appear once; got {metrics}")
    _check_measurable(cfg, file)
    _check_user_training(cfg, file)
    _check_sampler(cfg, file)
    _check_pruner(cfg, file)
    _check_data(cfg, file, source)
    _check_model(cfg, file, source)
    return _with_defaults(cfg, source)


def _check_measurable(cfg: RunConfig, file: str) -> None:
    """A meter's metric (peak_memory_mb, energy_j) as an objective or a `max_` constraint needs its meter on each
    device the study may train on; as a plain record it is simply absent where it cannot be measured."""
    from autotune.training import accel, energy_unavailable, memory_unavailable

    meters = {"peak_memory_mb": memory_unavailable, "energy_j": energy_unavailable}
    used = [(f"objectives.{i}.metric", o.metric) for i, o in enumerate(cfg.objectives) if o.metric in meters]
    used += [(f"constraints.max_{m}", m) for m in cfg.constraints.caps() if m in meters]
    if not used:
        return
    devices = cfg.space["device"].choices if "device" in cfg.space else None
    for name in devices or [cfg.train.get("device", SETTINGS["device"].default)]:
        try:
            dev = accel.resolve_device(str(name))
        except AutotuneError:  # a device this machine lacks: said when a trial asks for it
            continue
        for where, metric in used:
            why = meters[metric](dev)
            if why is not None:
                raise ConfigError(file, where, f"{metric} cannot be measured on device {name} here: {why}; allowed "
                                  "where measured: peak_memory_mb on a CUDA GPU or a Linux CPU, energy_j on an NVIDIA "
                                  "GPU through NVML (nvidia-ml-py) or a CPU with readable RAPL counters")


def _check_train_values(cfg: RunConfig, file: str) -> None:
    for key, value in cfg.train.items():
        if key.startswith(USER_PREFIX):
            continue
        try:
            SETTINGS[key].check(value)
        except ValueError as e:
            raise ConfigError(file, f"train.{key}", str(e)) from None


def _check_space(cfg: RunConfig, file: str) -> None:
    for key in cfg.space:
        if key in cfg.train:
            raise ConfigError(file, f"space.{key}", "is both fixed in train and searched in space; keep one")
    for key, spec in cfg.space.items():
        if _space_prefix(key):
            _check_prefixed_spec(key, spec, cfg, file)
        else:
            _check_spec(key, spec, cfg, file)


def _check_sampler(cfg: RunConfig, file: str) -> None:
    """The sampler's capabilities (search.SamplerKind) against the study: its objectives, study.candidates, the
    parameters a grid takes."""
    name = cfg.study.sampler
    kind = sampler_kind(name)
    if kind is None:
        return  # (an unknown name: said by the schema's check against the registry)
    if kind.objectives == "one" and cfg.multi_objective:
        several = [n for n in sampler_names() if sampler_kind(n).objectives == "any"]
        raise ConfigError(file, "study.sampler", f"{name} handles one objective only; for several use "
                                                 f"{', '.join(several)}")
    k = cfg.study.candidates
    if k != "auto" and k > 1:  # (auto: 1 wherever candidates cannot apply)
        drawn = [n for n in sampler_names() if sampler_kind(n).proposes == "parameter"]
        for cannot, why in (
            (not cfg.multi_objective, "it predicts each candidate's objectives to pick the one that adds most to the "
                                      "Pareto front, so the study needs two or more objectives"),
            (kind.proposes != "parameter",
             f"{name} proposes whole points itself; candidates are drawn from {' or '.join(drawn)}"),
            (cfg.study.strategy != "joint",
             "probe_then_tune narrows the space after probing; candidates need the joint strategy"),
        ):
            if cannot:
                raise ConfigError(file, "study.candidates", f"{why}; allowed here: 1 (got {k})")
    if kind.grid:
        for key, spec in cfg.space.items():
            if spec.type in ("float", "int") and spec.step is None:
                raise ConfigError(file, f"space.{key}", f"the {name} sampler needs categorical, bool or stepped "
                                                        "(step: ...) parameters; add a step or pick another sampler")


def _check_pruner(cfg: RunConfig, file: str) -> None:
    """A pruner for one objective (Optuna's) in a study with several, or the other way round."""
    name = cfg.pruning.pruner
    if name == "auto" or name in pruner_names("one") and name in pruner_names("several"):
        return
    if name not in pruner_names("one") and not cfg.multi_objective:
        raise ConfigError(file, "pruning.pruner", f"{name} is for studies with two or more objectives; "
                                                  f"for one use {', '.join(pruner_names('one'))}")
    if name not in pruner_names("several") and cfg.multi_objective:
        several = [n for n in pruner_names("several") if n != "none"]
        raise ConfigError(file, "pruning.pruner", f"Optuna's {name} pruner cannot prune a study with "
                                                  f"several objectives; use {', '.join(several)} or none")


def _check_data(cfg: RunConfig, file: str, source: str) -> None:
    d = cfg.data
    if d.factory is None and d.name is None:
        raise ConfigError(file, "data.name", f"give a dataset name ({', '.join(dataset_names())}) or data.factory")
    if d.factory is None and d.name == "npz":
        if not d.path:
            raise ConfigError(file, "data.path", "the npz dataset needs a path to a .npz file with arrays x and y")
        if not resolve_path(d.path, source).is_file():
            raise ConfigError(file, "data.path", f"no such file: {d.path}")
    if d.factory is not None and user_code_allowed():  # (a read-only command imports no user code)
        load_factory(d.factory, file, "data.factory")


def _check_model(cfg: RunConfig, file: str, source: str) -> None:
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


def _with_defaults(cfg: RunConfig, source: str) -> RunConfig:
    """The config with the defaults that depend on other fields filled in: the study's name (the file's stem),
    its storage (a SQLite file of that name), MLflow's URI and experiment (resolved once here, so the study
    stores where it was tracked). A new frozen object: nothing is mutated."""
    name = cfg.study.name or (Path(source).stem if source != "<config>" else "autotune")
    study = cfg.study.model_copy(update={"name": name, "storage": cfg.study.storage or f"sqlite:///studies/{name}.db"})
    update: dict[str, Any] = {"study": study}
    ml = cfg.tracking.mlflow
    if ml is not None:
        ml = ml.model_copy(update={
            "tracking_uri": ml.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///studies/mlflow.db",
            "experiment": ml.experiment or name})
        update["tracking"] = cfg.tracking.model_copy(update={"mlflow": ml})
    return cfg.model_copy(update=update)


def _check_user_training(cfg: RunConfig, file: str) -> None:
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


def _check_spec(key: str, spec: ParamSpec, cfg: RunConfig, file: str) -> None:
    where = f"space.{key}"
    setting = SETTINGS[key]
    if not setting.searchable:
        raise ConfigError(file, where, f"{key} cannot be searched; set it in train")
    if spec.type in ("float", "int"):
        if setting.kind not in ("float", "int"):
            raise ConfigError(file, f"{where}.type", f"{key} takes {setting.rule()}: use type categorical"
                                                     + (" or bool" if setting.kind == "bool" else ""))
        if setting.kind == "int" and spec.type == "float":
            raise ConfigError(file, f"{where}.type", f"{key} is an integer setting: use type int")
        for bound in ("low", "high"):
            try:
                setting.check(getattr(spec, bound))
            except ValueError as e:
                raise ConfigError(file, f"{where}.{bound}", f"{key} {e}") from None
    else:
        if setting.kind == "bool" and spec.type == "categorical":
            bad = [c for c in spec.choices or () if not isinstance(c, bool)]
            if bad:
                raise ConfigError(file, f"{where}.choices", f"{key} takes true or false; got {bad[0]!r}")
        for c in spec.choices or ():
            try:
                setting.check(c)
            except ValueError as e:
                if setting.kind == "choice":
                    msg = unknown(key, c, setting.choices)
                else:
                    msg = f"{key} {e}"
                raise ConfigError(file, f"{where}.choices", msg) from None
    _check_when(key, spec, cfg, file)


def _check_when(key: str, spec: ParamSpec, cfg: RunConfig, file: str) -> None:
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


# ---------------------------------------------------------------- prefixed space keys and the model section
# A `space:` key with a prefix searches something other than a trainer setting: `model.KEY` a key of the
# model section, `user.NAME` a parameter of the user's training function. Each prefix has its own check.


def _space_prefix(key: str) -> str | None:
    """The prefix of a searched key that is not a trainer setting ('model.' or 'user.'), or None."""
    return next((p for p in (MODEL_PREFIX, USER_PREFIX) if key.startswith(p)), None)


def _check_prefixed_spec(key: str, spec: ParamSpec, cfg: RunConfig, file: str) -> None:
    prefix = _space_prefix(key)
    if prefix == MODEL_PREFIX:
        _check_model_spec(key[len(MODEL_PREFIX):], spec, cfg, file)
    elif prefix == USER_PREFIX:  # any value: the user's function reads it (_check_user_training checks the rest)
        _check_when(key, spec, cfg, file)


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


def _check_model_spec(key: str, spec: ParamSpec, cfg: RunConfig, file: str) -> None:
    """`space: {model.KEY: ...}`: a key the model takes, never also fixed, every value one it accepts."""
    where = f"space.{MODEL_PREFIX}{key}"
    if cfg.trainer is not None:
        raise ConfigError(file, where, "model keys search the built-in model's architecture; a training function "
                                       "(trainer:) builds its own model: search a user parameter (user.NAME)")
    _check_when(MODEL_PREFIX + key, spec, cfg, file)
    if key == "name":
        return _check_model_name_spec(spec, cfg, file, where)
    searched = MODEL_PREFIX + "name" in cfg.space
    for name in _model_names(cfg, spec):
        _check_model_spec_for(key, spec, cfg.model.model_copy(update={"name": name}), file, where, searched)


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


def _check_task(cfg: RunConfig, file: str) -> None:
    """What one task cannot do with the built-in trainer: the other task's metrics, datasets, and
    (regression) accuracy-based steps. A training function (trainer:) reports its own metrics."""
    if cfg.trainer is not None:
        return
    other = "regression" if cfg.task == "classification" else "classification"
    for o in cfg.objectives:
        if o.metric in TASK_METRICS[other]:
            raise ConfigError(file, "objectives", f"{o.metric} is a {other} metric; with task {cfg.task} use "
                                                  f"{', '.join(TASK_METRICS[cfg.task])} or another metric")
    d = cfg.data
    if d.factory is None and d.name is not None and dataset_task(d.name) not in (None, cfg.task):
        if cfg.task == "classification":
            raise ConfigError(file, "task", f"{d.name} is a regression dataset: set task: regression")
        fit = [k for k in dataset_names() if dataset_task(k) != "classification"]
        raise ConfigError(file, "data.name", f"{d.name} is a classification dataset; task regression needs "
                                             f"{', '.join(fit)} or data.factory")
    if cfg.task == "regression":
        if cfg.distill is not None:
            raise ConfigError(file, "distill", "distillation matches a teacher's class probabilities: it is for "
                                               "task classification")
        if cfg.constraints.max_accuracy_drop is not None:
            raise ConfigError(file, "constraints.max_accuracy_drop", "is for task classification")
        for key in ("prune_method", "quantize", "qat"):
            if key in cfg.space or cfg.train.get(key, SETTINGS[key].default) not in ("none", False):
                where = f"space.{key}" if key in cfg.space else f"train.{key}"
                raise ConfigError(file, where, "compression measures classification accuracy: with task "
                                               "regression leave it off")


def _check_when_order(cfg: RunConfig, file: str) -> None:
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
