"""Reading a run file: YAML in, a checked, frozen `RunConfig` out (`load`, `from_dict`)."""

from __future__ import annotations

from autotune.config._checks import dataset_names, dataset_task, model_names, pruner_names, sampler_names
from autotune.config._load import from_dict, load, read_yaml
from autotune.core._errors import ConfigError
from autotune.spec._schema import (
    METRICS,
    TASK_METRICS,
    TASKS,
    DataConfig,
    DistillConfig,
    ModelConfig,
    ParamSpec,
    RunConfig,
)

__all__ = ["METRICS", "TASKS", "TASK_METRICS", "ConfigError", "DataConfig", "DistillConfig", "ModelConfig", "ParamSpec",
           "RunConfig", "dataset_names", "dataset_task", "from_dict", "load", "model_names", "pruner_names",
           "read_yaml",
           "sampler_names"]
