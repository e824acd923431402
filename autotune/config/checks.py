"""The rules of a run file that span fields or need a registry's names, run once by `load`/`from_dict`: the
order they run in, the study-wide ones (task, objectives, sampler, pruner, data) and the defaults that depend
on other fields. The rules of one part live beside it: space_keys.py (train: and space:), conditions.py
(`when`), model_keys.py (the model), user_training.py (trainer:), registered.py (the registries' names)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from autotune.config.conditions import check_when_order
from autotune.config.model_keys import check_model
from autotune.config.registered import dataset_names, dataset_task, pruner_names, sampler_kind, sampler_names
from autotune.config.space_keys import check_space, check_train_values
from autotune.config.user_training import check_user_training
from autotune.core import AutotuneError, ConfigError, load_factory, resolve_path, user_code_allowed
from autotune.spec import SETTINGS, TASK_METRICS, RunConfig


def check_semantics(cfg: RunConfig, file: str, source: str) -> RunConfig:
    """Rules that span fields, in this order (the first broken one is the message): settings values,
    fixed-vs-searched, `when`, task, objectives, user training, sampler and pruner fit, data, model. Then
    the defaults that depend on other fields (study name, storage, MLflow)."""
    check_train_values(cfg, file)
    check_space(cfg, file)
    check_when_order(cfg, file)
    _check_task(cfg, file)
    metrics = [o.metric for o in cfg.objectives]
    if len(set(metrics)) != len(metrics):
        raise ConfigError(file, "objectives", f"each metric may appear once; got {metrics}")
    _check_measurable(cfg, file)
    check_user_training(cfg, file)
    _check_sampler(cfg, file)
    _check_pruner(cfg, file)
    _check_data(cfg, file, source)
    check_model(cfg, file, source)
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
