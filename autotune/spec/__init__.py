"""What a run file may say, as types: the schema (`RunConfig` and its sections, pydantic), the settings catalogue
(every trainer setting: type, default, doc), the metrics catalogue (every metric: direction, unit, source) and the
registries' names; and what a study stores of each trial and
of itself (`TrialRecord`, `StudyRecord`: the stored-attrs catalogue). No YAML reading (config/), no torch."""

from __future__ import annotations

from autotune.spec.metrics import (
    CATALOGUE,
    CLOCKS,
    DIRECTIONS,
    EPOCH_FIELDS,
    INFERENCE,
    PER_EPOCH,
    REPORTED,
    fmt,
    is_fraction,
    is_quality,
    label,
    per_epoch,
    short,
    shown_with,
    task_metrics,
)
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
    "APPLIERS", "BUILTIN_ONLY", "CATALOGUE", "CLOCKS", "DIRECTIONS", "DataConfig", "DistillConfig", "EPOCH_FIELDS",
    "FastestWithin", "INFERENCE", "MODEL_PREFIX", "ModelConfig", "MostAccurateUnder", "PER_EPOCH", "PROBE_PREFIX",
    "ParamSpec", "REPORTED", "RunConfig", "SAMPLER_NAMES", "SETTINGS", "STRATEGIES", "Settings", "StudyRecord",
    "TASKS", "TASK_METRICS", "TrialRecord", "USER_PREFIX", "acting", "applied_by", "check_params", "fmt",
    "is_fraction", "is_quality", "label", "merge", "per_epoch", "short", "shown_with", "task_metrics",
]
