"""What a run file may say, as types: the schema (`RunConfig` and its sections, pydantic), the settings catalogue
(every trainer setting: type, default, doc) and the registries' names; and what a study stores of each trial and
of itself (`TrialRecord`, `StudyRecord`: the stored-attrs catalogue). No YAML reading (config/), no torch."""

from __future__ import annotations

from autotune.spec.names import SAMPLER_NAMES
from autotune.spec.schema import (
    MODEL_PREFIX,
    STRATEGIES,
    TASK_METRICS,
    TASKS,
    USER_PREFIX,
    DataConfig,
    DistillConfig,
    FastestWithin,
    ModelConfig,
    MostAccurateUnder,
    ParamSpec,
    RunConfig,
)
from autotune.spec.settings import APPLIERS, BUILTIN_ONLY, SETTINGS, Settings, acting, applied_by, check_params, merge
from autotune.spec.stored import PROBE_PREFIX, StudyRecord, TrialRecord

__all__ = [
    "APPLIERS", "BUILTIN_ONLY", "DataConfig", "DistillConfig", "FastestWithin", "MODEL_PREFIX", "ModelConfig",
    "MostAccurateUnder", "PROBE_PREFIX", "ParamSpec", "RunConfig", "SAMPLER_NAMES", "SETTINGS", "STRATEGIES",
    "Settings", "StudyRecord", "TASKS", "TASK_METRICS", "TrialRecord", "USER_PREFIX", "acting", "applied_by",
    "check_params", "merge",
]
