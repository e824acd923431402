"""Reading a run file: YAML in, a checked, frozen `RunConfig` out (`load`, `from_dict`)."""

from __future__ import annotations

from autotune.config.loader import from_dict, load, read_yaml
from autotune.config.registered import dataset_names, dataset_task, model_names, pruner_names, sampler_names
from autotune.config.user_training import check_one_device
from autotune.core import ConfigError
from autotune.spec import (
    TASK_METRICS,
    TASKS,
    DataConfig,
    DistillConfig,
    ModelConfig,
    ParamSpec,
    RunConfig,
)

__all__ = [
    "ConfigError", "DataConfig", "DistillConfig", "ModelConfig", "ParamSpec", "RunConfig", "TASKS",
    "TASK_METRICS", "check_one_device",
    "dataset_names", "dataset_task", "from_dict", "load", "model_names", "pruner_names", "read_yaml",
    "sampler_names",
]
