"""`load(path, overrides) -> RunConfig`: the only code that sees raw YAML dicts.

Validation happens here, once: unknown keys (all of them, with close matches), types,
ranges and names against the registries' names. Past this module every config is a
frozen, typed object.
"""

from __future__ import annotations

import copy
import importlib
import os
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError, describe_exception, one_of, suggest, unknown
from .metrics import CLOCKS, DIRECTIONS, INFERENCE, REPORTED, task_metrics
from .settings import SETTINGS, merge

STRATEGIES = ("joint", "probe_then_tune")  # study.strategy (strategy.py)
METRICS = DIRECTIONS  # metric -> natural direction, for every built-in objective (metrics.py)
REPORTED_METRICS = REPORTED  # what a training function reports with ctx.report (the clocks are the context's)
USER_PREFIX = "user."  # `user.NAME` in train/space: a parameter of the user's training function (ctx.params[NAME])
TASKS = ("classification", "regression")
# metrics that only one task has; every other metric is measured for both
TASK_METRICS: dict[str, tuple[str, ...]] = {t: task_metrics(t) for t in TASKS}
# `model.KEY` in `space:` searches a key of the model section (the architecture)
MODEL_PREFIX = "model."


# ---------------------------------------------------------------- names from the registries
# Each registry is a mapping next to its builders (samplers.py, pruners.py, data.py, models.py). Those modules
# import this one, so their names are read when a config is validated, never copied here.


def sampler_names() -> list[str]:
    from .samplers import SAMPLERS

    return list(SAMPLERS)


def pruner_names(objectives: str | None = None) -> list[str]:
    """Registered pruners (`auto` first); `objectives` one or several: those a study with that many can use."""
    from .pruners import PRUNERS

    if objectives is None:
        return ["auto", *PRUNERS]
    return [n for n, kind in PRUNERS.items() if kind.objectives in (objectives, "any")]


def dataset_names() -> list[str]:
    from .data import DATASETS

    return list(DATASETS)


def dataset_task(name: str) -> str | None:
    """The task a built-in dataset's labels are for (None: either, the file decides)."""
    from .data import DATASETS

    return DATASETS[name].task


def model_names() -> list[str]:
    from .models import MODELS

    return list(MODELS)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WarmStart(_Model):
    """Start a new study with the best configurations of an earlier one (warm.py)."""

    storage: str = ""  # default: this study's storage
    study: str
    top_k: int = Field(5, ge=1)


class StudyConfig(_Model):
    name: str = ""
    storage: str = ""
    sampler: str = "tpe"
    sampler_args: dict[str, Any] = Field(default_factory=dict)
    n_trials: int | None = Field(30, ge=1)
    timeout: float | None = Field(None, gt=0)
    seed: int | None = 0
    trial_seed: int | None = None  # trial n trains with trial_seed + n (unset: seed x 100003 + n); set by export
    heartbeat_interval: int | None = Field(None, ge=1)
    grace_period: int | None = Field(None, ge=1)
    max_repeated_errors: int = Field(3, ge=1)  # this many trials in a row failing the same way stop the run
    strategy: str = "joint"  # joint | probe_then_tune: how the search uses the speed probe (strategy.py)
    warm_start: WarmStart | None = None

    @field_validator("strategy")
    @classmethod
    def _strategy(cls, v: str) -> str:
        if v not in STRATEGIES:
            raise ValueError(unknown("strategy", v, STRATEGIES))
        return v

    @field_validator("sampler")
    @classmethod
    def _sampler(cls, v: str) -> str:
        if v not in sampler_names():
            raise ValueError(unknown("sampler", v, sampler_names()))
        return v


class Objective(_Model):
    """A metric to optimize: a built-in one (direction optional) or one a training function reports."""

    metric: str
    direction: Literal["maximize", "minimize"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _direction(cls, data: Any) -> Any:
        """A built-in metric's natural direction when none is given."""
        if isinstance(data, dict) and data.get("direction") is None and data.get("metric") in METRICS:
            return {**data, "direction": METRICS[data["metric"]]}
        return data


class DataConfig(_Model):
    name: str | None = "digits"
    factory: str | None = None
    val_fraction: float = Field(0.2, gt=0, lt=1)
    split_seed: int = 0
    path: str | None = None  # npz: a file with arrays x and y; image_folder, cifar10, cifar100: a folder
    image_size: int | None = Field(None, ge=1)  # image_folder: resize every image to this square size
    cache_dir: str | None = None  # image_folder, mnist1d: where arrays are kept (default studies/.cache)
    n_samples: int = Field(4000, ge=10)  # synthetic
    shape: tuple[int, ...] = (3, 16, 16)  # synthetic: C, H, W (or a flat feature count)
    n_classes: int = Field(10, ge=2)  # synthetic
    label_noise: float = Field(0.0, ge=0, lt=1)  # synthetic
    kwargs: dict[str, Any] = Field(default_factory=dict)  # factory: its arguments; mnist1d: generation arguments

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and v not in dataset_names():
            raise ValueError(unknown("dataset", v, dataset_names(), " (or data.factory)"))
        return v


class ModelConfig(_Model):
    """A model by name (or factory). Architecture keys left null take the model's own default; each model
    takes some of them (models.model_keys), and each may be searched as `model.KEY` in `space:`."""

    name: str | None = "cnn"
    factory: str | None = None
    channels: tuple[int, ...] | None = None  # cnn: conv block widths (default 32, 64)
    hidden: int | None = Field(None, ge=1)  # cnn: head width; mlp: layer width (default 128)
    depth: int | None = Field(None, ge=1)  # mlp: hidden layers (2); resnet: 6n+2 layers (20); cnn1d: conv blocks (3)
    width: int | None = Field(None, ge=1)  # resnet: first stage's channels, doubled per stage (16); cnn1d: channels
    arch: str | None = None  # torchvision: a model name of torchvision.models, e.g. resnet18
    kwargs: dict[str, Any] = Field(default_factory=dict)
    checkpoint: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and v not in model_names():
            raise ValueError(unknown("model", v, model_names(), " (or model.factory)"))
        return v

    @field_validator("channels")
    @classmethod
    def _channels(cls, v: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if v is not None and (not v or any(c < 1 for c in v)):
            raise ValueError(f"must be a non-empty list of positive integers; got {list(v)}")
        return v


class ParamSpec(_Model):
    """One searched setting: float/int ranges, categorical choices, or bool; optional `when`."""

    type: Literal["float", "int", "categorical", "bool"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] | None = None
    when: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _bool_choices(cls, data: Any) -> Any:
        """A bool parameter's choices are its two values."""
        if isinstance(data, dict) and data.get("type") == "bool" and (data.get("choices") is None or
                                                                     list(data["choices"]) == [False, True]):
            return {**data, "choices": (False, True)}
        return data

    @model_validator(mode="after")
    def _shape(self) -> ParamSpec:
        if self.type in ("float", "int"):
            if self.low is None or self.high is None:
                raise ValueError("low: type float and int need low and high")
            if self.choices is not None:
                raise ValueError(f"choices: is for type categorical, not {self.type}")
            if self.low >= self.high:
                raise ValueError(f"low: must be < high; got low={self.low:g}, high={self.high:g}")
            if self.log and self.low <= 0:
                raise ValueError(f"low: must be > 0 when log is true; got {self.low:g}")
            if self.log and self.step is not None:
                raise ValueError("step: step and log cannot be used together")
            if self.step is not None and self.step <= 0:
                raise ValueError(f"step: must be > 0; got {self.step:g}")
            if self.type == "int" and (self.low != int(self.low) or self.high != int(self.high)):
                raise ValueError(f"low: low and high must be integers for type int; got {self.low:g}, {self.high:g}")
        elif self.type == "categorical":
            if not self.choices:
                raise ValueError("choices: must be a non-empty list")
            if len(set(map(repr, self.choices))) != len(self.choices):
                raise ValueError(f"choices: must be distinct; got {list(self.choices)}")
            if any(k is not None for k in (self.low, self.high, self.step)) or self.log:
                raise ValueError("type: low/high/step/log are for float and int, not categorical")
        else:  # bool: the two values (_bool_choices); [false, true] is what to_dict() writes back: a stored
            # config round-trips
            if any(k is not None for k in (self.low, self.high, self.step)) or self.choices != (False, True):
                raise ValueError("type: bool takes no low/high/step/choices")
        return self


class Divergence(_Model):
    loss_factor: float = Field(4.0, gt=1)


class Slow(_Model):
    max_trial_seconds: float | None = Field(None, gt=0)
    vs_front: float | None = Field(None, gt=1)
    hang_seconds: float | None = Field(None, gt=0)
    # before training: stop a trial whose predicted time adds < this share of the front's hypervolume even at
    # the front's best quality + front_margin (pruners.check_front_gain)
    min_front_gain: float | None = Field(None, gt=0, lt=1)
    front_margin: float = Field(0.02, ge=0)


class PruningConfig(_Model):
    pruner: str = "auto"
    pruner_args: dict[str, Any] = Field(default_factory=dict)
    divergence: Divergence | None = Divergence()
    slow: Slow = Slow()
    oom: Literal["prune", "retry_smaller_batch"] = "prune"

    @field_validator("pruner")
    @classmethod
    def _pruner(cls, v: str) -> str:
        if v not in pruner_names():
            raise ValueError(unknown("pruner", v, pruner_names()))
        return v


class FastestWithin(_Model):
    fastest_within: float = Field(ge=0, lt=1)


class MostAccurateUnder(_Model):
    most_accurate_under_s: float = Field(gt=0)


class Constraints(_Model):
    max_accuracy_drop: float | None = Field(None, ge=0, lt=1)


class DistillConfig(_Model):
    """Knowledge distillation: train the model against a teacher's softened predictions too."""

    teacher: str  # a state dict (e.g. from `autotune best FILE --save-model PATH`), or "best"
    teacher_study: str | None = None  # with teacher: best, the study whose recommended trial teaches
    teacher_model: ModelConfig | None = None  # the teacher's architecture; default: the `model` section
    alpha: float = Field(0.5, ge=0, le=1)  # weight of the distillation term (1 - alpha: the label loss)
    temperature: float = Field(4.0, gt=0)


class MlflowConfig(_Model):
    """Log the study to MLflow (autotune[mlflow]): one parent run, one nested run per trial."""

    tracking_uri: str = ""  # default: $MLFLOW_TRACKING_URI, else sqlite:///studies/mlflow.db
    experiment: str = ""  # default: the study's name


class TrackingConfig(_Model):
    mlflow: MlflowConfig | None = None


class RunConfig(_Model):
    study: StudyConfig = StudyConfig()
    task: Literal["classification", "regression"] = "classification"
    objectives: tuple[Objective, ...] = (
        Objective(metric="val_accuracy"),
        Objective(metric="train_time_s"),
    )
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    train: dict[str, Any] = Field(default_factory=dict)
    space: dict[str, ParamSpec] = Field(default_factory=dict)
    pruning: PruningConfig = PruningConfig()
    select: str | FastestWithin | MostAccurateUnder = "knee"
    constraints: Constraints = Constraints()
    distill: DistillConfig | None = None
    trainer: str | None = None  # "package.module:function": a user's training function fit(ctx)
    metrics: tuple[str, ...] = ()  # further metrics that function may ctx.report (beyond the objectives)
    tracking: TrackingConfig = TrackingConfig()
    source: str = Field("<config>", exclude=True)

    @field_validator("select", mode="before")
    @classmethod
    def _select(cls, v: Any) -> Any:
        if v == "knee":
            return v
        if isinstance(v, dict) and len(v) == 1:
            key = next(iter(v))
            if key == "fastest_within":
                return FastestWithin.model_validate(v)
            if key == "most_accurate_under_s":
                return MostAccurateUnder.model_validate(v)
        raise ValueError(f"must be knee, {{fastest_within: F}} or {{most_accurate_under_s: S}}; got {v!r}")

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def directions(self) -> list[str]:
        return [str(o.direction) for o in self.objectives]

    def fixed(self) -> dict[str, Any]:
        """Every trainer setting that is not searched: defaults overlaid with `train:` (user parameters too)."""
        return {k: v for k, v in merge(self.train).items() if k not in self.space}

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# ---------------------------------------------------------------- loading


def load(path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read, validate and freeze a YAML run file. Raises ConfigError on any mistake."""
    path = Path(path)
    raw = read_yaml(path)
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(path.name, "", f"top level must be a mapping of sections; got {type(raw).__name__}")
    return from_dict(raw, overrides=overrides, source=str(path))


def read_yaml(path: Path) -> Any:
    """A YAML file's content (None if empty); a file that cannot be read as YAML text is one ConfigError:
    missing, a directory, no permission, binary, not UTF-8, malformed."""
    if path.is_dir():
        raise ConfigError(str(path), "", "is a directory, not a YAML file")
    if not path.exists():
        raise ConfigError(str(path), "", "no such file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(str(path), "", f"cannot read: {e.strerror or e}") from None
    name = path.name
    nul = data.find(b"\0")
    if nul >= 0:
        raise ConfigError(name, "", f"not a text file (byte 0x00 at offset {nul}): a binary file?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(name, "", f"not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}, column {col}; "
                                    "save the file as UTF-8") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(name, "", f"malformed YAML: {where}{problem}") from None


def from_dict(raw: dict[str, Any], overrides: dict[str, Any] | None = None, source: str = "<config>") -> RunConfig:
    """Validate a raw dict (as read from YAML) into a RunConfig."""
    file = Path(source).name
    raw = copy.deepcopy(raw)
    for key, value in (overrides or {}).items():
        _apply_override(raw, key, value, file)
    _check_unknown_keys(raw, RunConfig, "", file)
    _normalize(raw, file)
    try:
        cfg = RunConfig.model_validate({**raw, "source": source})
    except ValidationError as e:
        raise _first_error(e, file) from None
    return _check_semantics(cfg, file, source)


def _apply_override(raw: dict[str, Any], dotted: str, value: Any, file: str) -> None:
    parts = dotted.split(".")
    if len(parts) > 2 and parts[0] in ("train", "space") and f"{parts[1]}." in (USER_PREFIX, MODEL_PREFIX):
        parts = [parts[0], f"{parts[1]}.{parts[2]}", *parts[3:]]  # train.user.width: the key is user.width
    node = raw
    for i, part in enumerate(parts[:-1]):
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(file, ".".join(parts[: i + 1]), "cannot override inside a non-mapping value")
        node = nxt
    node[parts[-1]] = value


def _fields(model: type[BaseModel]) -> list[str]:
    return [n for n in model.model_fields if n != "source"]


def _check_unknown_keys(raw: Any, model: type[BaseModel], prefix: str, file: str) -> None:
    """Report every unknown key at this level and below, at once."""
    problems: list[str] = []

    def walk(node: Any, m: type[BaseModel], pre: str) -> None:
        if not isinstance(node, dict):
            return
        known = _fields(m)
        for key in node:
            if key not in known:
                problems.append(f"{pre}{key}: unknown key{suggest(str(key), known)}; {one_of(known)}")
        for key in known:
            sub = _submodel(m, key)
            if sub is not None and key in node and not (m is RunConfig and key == "select"):
                walk(node[key], sub, f"{pre}{key}.")

    walk(raw, model, prefix)
    problems += _check_settings_keys(raw)
    if problems:
        first_key, _, first_msg = problems[0].partition(": ")
        more = "; ".join(problems[1:])
        raise ConfigError(file, first_key, first_msg + (f"; also {more}" if more else ""))


def _check_settings_keys(raw: dict[str, Any]) -> list[str]:
    problems = []
    for section in ("train", "space"):
        block = raw.get(section)
        if not isinstance(block, dict):
            continue
        for key in block:
            if key == "early_stopping" and section == "train":
                continue
            if str(key).startswith(USER_PREFIX):
                if not str(key)[len(USER_PREFIX):].isidentifier():
                    problems.append(f"{section}.{key}: a user parameter is user.NAME with NAME a Python identifier")
                continue
            if section == "space" and str(key).startswith(MODEL_PREFIX):
                continue  # checked once the model section is known: _check_prefixed_spec
            if key not in SETTINGS:
                problems.append(f"{section}.{key}: unknown setting{suggest(str(key), SETTINGS)}; {one_of(SETTINGS)}")
        if section == "space":
            for key, spec in block.items():
                if isinstance(spec, dict):
                    for k in spec:
                        if k not in ParamSpec.model_fields:
                            known = list(ParamSpec.model_fields)
                            problems.append(f"space.{key}.{k}: unknown key{suggest(str(k), known)}; {one_of(known)}")
    return problems


def _submodel(model: type[BaseModel], field: str) -> type[BaseModel] | None:
    ann = model.model_fields[field].annotation
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    if typing.get_origin(ann) in (typing.Union, types.UnionType):  # Optional[Model]
        for arg in typing.get_args(ann):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return arg
    return None


def _normalize(raw: dict[str, Any], file: str) -> None:
    """Shorthands: `train.early_stopping: {patience, min_delta}`; `objectives: [val_accuracy]`."""
    train = raw.get("train")
    if isinstance(train, dict) and "early_stopping" in train:
        es = train.pop("early_stopping")
        if es is None or es is False:
            es = {"patience": 0}
        if not isinstance(es, dict) or set(es) - {"patience", "min_delta"}:
            raise ConfigError(file, "train.early_stopping", "must be a mapping with keys patience, min_delta")
        train["early_stopping_patience"] = es.get("patience", 3)
        train["early_stopping_min_delta"] = es.get("min_delta", 0.0)
    objs = raw.get("objectives")
    if objs is None and raw.get("task") == "regression":  # the classification default has val_accuracy
        raw["objectives"] = [{"metric": "val_mse"}, {"metric": "train_time_s"}]
    if isinstance(objs, list):
        raw["objectives"] = [{"metric": o} if isinstance(o, str) else o for o in objs]
    if isinstance(objs, (list, tuple)) and not objs:
        raise ConfigError(file, "objectives", "must list at least one objective")


def _first_error(e: ValidationError, file: str) -> ConfigError:
    err = e.errors()[0]
    loc = [str(p) for p in err["loc"] if not re.fullmatch(r"[A-Z]\w*|function-after\[.*\]|literal\[.*\]", str(p))]
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
        sub = re.match(r"(\w+): ", msg)  # a model validator names the field it blames
        if sub:
            loc.append(sub.group(1))
            msg = msg[sub.end():]
    elif "input" in err and err["type"] not in ("missing",):
        msg = f"{msg}; got {err['input']!r}"
    return ConfigError(file, ".".join(loc), msg)


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
    _check_user_training(cfg, file)
    _check_sampler(cfg, file)
    _check_pruner(cfg, file)
    _check_data(cfg, file, source)
    _check_model(cfg, file, source)
    return _with_defaults(cfg, source)


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
    if cfg.study.sampler == "cmaes" and cfg.multi_objective:
        raise ConfigError(file, "study.sampler", "cmaes handles one objective only; for several use tpe, nsga2, "
                                                 "random, gp or qmc")
    if cfg.study.sampler == "grid":
        for key, spec in cfg.space.items():
            if spec.type in ("float", "int") and spec.step is None:
                raise ConfigError(file, f"space.{key}", "the grid sampler needs categorical, bool or stepped "
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
    if d.factory is not None:
        load_factory(d.factory, file, "data.factory")


def _check_model(cfg: RunConfig, file: str, source: str) -> None:
    m = cfg.model
    if m.factory is None and m.name is None:
        raise ConfigError(file, "model.name", f"give a model name ({', '.join(model_names())}) or model.factory")
    if m.factory is not None:
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
        if o.metric in METRICS:
            continue
        if cfg.trainer is None:
            raise ConfigError(file, f"objectives.{i}.metric", f"unknown metric {o.metric!r}{suggest(o.metric, METRICS)}"
                                                              f"; {one_of(METRICS)} (a training function, `trainer:`, "
                                                              "may report others)")
        if o.direction is None:
            raise ConfigError(file, f"objectives.{i}.direction", f"{o.metric} is not a built-in metric "
                                                                 f"({', '.join(METRICS)}): give its direction, "
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
    if cfg.trainer is not None:
        fn = load_factory(cfg.trainer, file, "trainer", near=cfg.source)
        check_fit_signature(fn, cfg.trainer, file)
        _check_builtin_only(cfg, file)


# Steps on the built-in trainer's model and data that a user's training function does not expose.
BUILTIN_ONLY = {"prune_method": "none", "prune_amount": 0.0, "finetune_epochs": 0, "quantize": "none", "qat": False,
                "freeze": "none"}
BUILTIN_ONLY_METRICS = INFERENCE


def _check_builtin_only(cfg: RunConfig, file: str) -> None:
    for key, off in BUILTIN_ONLY.items():
        where = f"space.{key}" if key in cfg.space else f"train.{key}" if key in cfg.train else None
        if where is not None and (key in cfg.space or cfg.train[key] != off):
            raise ConfigError(file, where, f"{key}: compression and transfer learning run on the built-in trainer's "
                                           "model; with trainer: they are not applied (drop the key)")
    for i, o in enumerate(cfg.objectives):
        if o.metric in BUILTIN_ONLY_METRICS:
            raise ConfigError(file, f"objectives.{i}.metric", f"{o.metric} is measured on the built-in trainer's "
                                                              "model; with trainer: report your own metric instead")
    if cfg.distill is not None:
        raise ConfigError(file, "distill", "distillation runs in the built-in trainer's loss; with trainer: distill "
                                           "in your own loss function")


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
    where = f"space.{key}"
    if spec.when:
        for dep, val in spec.when.items():
            if dep not in cfg.space and dep not in SETTINGS and dep not in cfg.train:
                raise ConfigError(file, f"{where}.when.{dep}", f"unknown setting{suggest(dep, SETTINGS)}")
            if dep == key:
                raise ConfigError(file, f"{where}.when", "a parameter cannot depend on itself")
            if dep in cfg.space:
                choices = cfg.space[dep].choices
                vals = val if isinstance(val, list) else [val]
                if choices is None:
                    raise ConfigError(file, f"{where}.when.{dep}", f"{dep} must be categorical or bool to be a "
                                                                   "condition")
                for v in vals:
                    if v not in choices:
                        raise ConfigError(file, f"{where}.when.{dep}", f"{v!r} is not among {dep}'s choices "
                                                                       f"{list(choices)}")


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
    from . import models

    if m.factory is not None:
        return models.factory_keys(load_factory(m.factory, file, f"{where}.factory"))
    return models.model_keys(str(m.name))


def _check_model_keys(m: ModelConfig, file: str, where: str) -> None:
    """Fixed architecture keys of a named model: each one it takes, with a value it accepts. (A factory
    is offered the keys its signature takes, as it is offered input_shape and dropout.)"""
    from . import models

    if m.factory is not None:
        return
    takes = models.model_keys(str(m.name))
    fields = m.model_dump()
    if m.name == "torchvision" and fields["arch"] is None:
        raise ConfigError(file, f"{where}.arch", "torchvision needs an arch, e.g. resnet18 (a name from "
                                                 "torchvision.models.list_models())")
    for key in models.MODEL_KEYS:
        value = fields[key]
        if value is None:
            continue
        if key not in takes:
            raise ConfigError(file, f"{where}.{key}", f"{m.name} does not take {key}; it takes {', '.join(takes)}")
        why = models.check_value(m.name, key, value)
        if why is not None:
            raise ConfigError(file, f"{where}.{key}", why)
    if m.name == "torchvision":
        bad = sorted({"weights", "pretrained", "weights_backbone"} & set(m.kwargs))
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
    from . import models

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


def load_factory(ref: str, file: str = "<config>", key: str = "factory", near: str | None = None) -> Any:
    """Import `package.module:function`; a failure is a ConfigError naming the reference. Modules are found
    on the import path, in the working directory, and (`near`: the config file's path) next to the YAML file."""
    mod_name, sep, attr = ref.partition(":")
    if not sep or not mod_name or not attr:
        raise ConfigError(file, key, f"must look like 'package.module:function'; got {ref!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:  # a user's own module in the working directory
        sys.path.append(os.getcwd())
    if near is not None and near != "<config>":
        here = str(Path(near).resolve().parent)
        if here not in sys.path:
            sys.path.append(here)
    try:
        module = importlib.import_module(mod_name)
    except Exception as e:  # ImportError, or the user's module raising on import
        raise ConfigError(file, key, f"cannot import {mod_name!r}: {describe_exception(e)}") from None
    fn = module.__dict__.get(attr)
    if fn is None or not callable(fn):
        raise ConfigError(file, key, f"module {mod_name!r} has no callable {attr!r}")
    return fn


def resolve_path(p: str, source: str) -> Path:
    """Relative data paths are tried as given (cwd), then next to the config file."""
    path = Path(p)
    if path.is_absolute() or path.exists() or source == "<config>":
        return path
    return Path(source).parent / path

