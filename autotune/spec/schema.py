"""The run file's schema: frozen pydantic models, their defaults and the checks one field can make alone.

Names that come from registries (samplers, pruners, datasets, models) are the plain tuples of `names`, which a
contract test keeps equal to the registries; the rules that span fields or need a registry are config's checks.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from autotune.core import shown, unknown
from autotune.spec.metrics import CATALOGUE, DIRECTIONS, task_metrics
from autotune.spec.names import DATASET_NAMES, MODEL_NAMES, PRUNER_NAMES, SAMPLER_NAMES
from autotune.spec.settings import merge

STRATEGIES = ("joint", "probe_then_tune")  # study.strategy (strategy.py)
USER_PREFIX = "user."  # `user.NAME` in train/space: a parameter of the user's training function (ctx.params[NAME])
TASKS = ("classification", "regression")
# metrics that only one task has; every other metric is measured for both
TASK_METRICS: dict[str, tuple[str, ...]] = {t: task_metrics(t) for t in TASKS}
# `model.KEY` in `space:` searches a key of the model section (the architecture)
MODEL_PREFIX = "model."


def _not_bool(v: Any) -> Any:
    """YAML's true/false are Python bools, which are ints: `n_trials: true` would be 1 trial. Never a number."""
    if isinstance(v, bool):
        raise ValueError(f"must be a number, not a boolean; got {str(v).lower()}")
    return v


# Every number of the schema: a bool is refused; otherwise pydantic's usual coercion (3.0 -> 3, "1e-3" -> 0.001).
Int = Annotated[int, BeforeValidator(_not_bool)]
Float = Annotated[float, BeforeValidator(_not_bool)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WarmStart(_Model):
    """Start a new study with the best configurations of an earlier one (warm.py)."""

    storage: str = ""  # default: this study's storage
    study: str
    top_k: Int = Field(5, ge=1)


class StudyConfig(_Model):
    name: str = ""  # study name in the storage (default: the run file's name)
    storage: str = ""  # default sqlite:///studies/<name>.db; journal:///F.log, postgresql://, mysql://, grpc://
    sampler: str = "tpe"  # an Optuna sampler by name (search/samplers.py; the error lists them)
    sampler_args: dict[str, Any] = Field(default_factory=dict)  # keyword arguments for the Optuna sampler
    n_trials: Int | None = Field(30, ge=1)  # finished (complete or pruned) trials the study should hold
    timeout: Float | None = Field(None, gt=0)  # seconds for one run
    seed: Int | None = 0  # sampler seed; trial n trains with seed x 100003 + n
    # trial n trains with trial_seed + n (unset: seed x 100003 + n); with n_trials 1 (an export), every attempt
    # trains trial_seed itself (a failed one does not move it); set by export
    trial_seed: Int | None = None
    heartbeat_interval: Int | None = Field(None, ge=1)  # RDB storages: seconds between a running trial's heartbeats
    grace_period: Int | None = Field(None, ge=1)  # RDB: a trial silent this long is failed (orphaned), retried once
    max_repeated_errors: Int = Field(3, ge=1)  # this many trials in a row failing the same way stop the run
    strategy: str = "joint"  # joint | probe_then_tune: how the search uses the speed probe (strategy.py)
    # several objectives: candidates per trial (the sampler's proposal, points near the front, uniform points); the
    # one whose predicted objectives add most to the front runs (search/predicted.py). 1: the sampler's one proposal,
    # as is; auto (default): 256 while one choice costs at most 2 % of a trial's training time (minutes-long
    # trials), else 1 (sub-second ones: bench/RESULTS.md)
    candidates: Annotated[Int, Field(ge=1)] | Literal["auto"] = "auto"
    warm_start: WarmStart | None = None  # start from an earlier study's best trials

    @field_validator("candidates", mode="before")
    @classmethod
    def _candidates(cls, v: Any) -> Any:
        if isinstance(v, str) and v != "auto" or isinstance(v, (bool, float)) or (isinstance(v, int) and v < 1):
            raise ValueError(f"must be auto or a whole number >= 1; got {shown(v)}")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        """'' is the default (the file's name); a blank one or one padded with spaces names a study nobody can
        tell from another when it is listed."""
        if v and not v.strip():
            raise ValueError(f"must not be blank; got {shown(v)} (leave it out to use the file's name)")
        if v != v.strip():
            raise ValueError(f"must not start or end with whitespace; got {shown(v)}")
        return v

    @field_validator("strategy")
    @classmethod
    def _strategy(cls, v: str) -> str:
        if v not in STRATEGIES:
            raise ValueError(unknown("strategy", v, STRATEGIES))
        return v

    @field_validator("sampler")
    @classmethod
    def _sampler(cls, v: str) -> str:
        if v not in SAMPLER_NAMES:
            raise ValueError(unknown("sampler", v, SAMPLER_NAMES))
        return v


class Objective(_Model):
    """A metric to optimize: a built-in one (direction optional) or one a training function reports."""

    metric: str
    direction: Literal["maximize", "minimize"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _direction(cls, data: Any) -> Any:
        """A built-in metric's natural direction when none is given."""
        if isinstance(data, dict) and data.get("direction") is None and data.get("metric") in DIRECTIONS:
            return {**data, "direction": DIRECTIONS[data["metric"]]}
        return data


class DataConfig(_Model):
    name: str | None = "digits"  # a built-in dataset, or null with factory; nothing is ever downloaded
    factory: str | None = None  # "package.module:function" returning (x, y) arrays
    val_fraction: Float = Field(0.2, gt=0, lt=1)  # validation split (stratified for classification)
    split_seed: Int = 0  # seed of the train/validation split
    path: str | None = None  # npz: a file with arrays x and y; image_folder, cifar10, cifar100: a folder
    image_size: Int | None = Field(None, ge=1)  # image_folder: resize every image to this square size
    cache_dir: str | None = None  # image_folder, mnist1d: where arrays are kept (default studies/.cache)
    n_samples: Int = Field(4000, ge=10)  # synthetic
    shape: tuple[Int, ...] = (3, 16, 16)  # synthetic: C, H, W (or a flat feature count)
    n_classes: Int = Field(10, ge=2)  # synthetic
    label_noise: Float = Field(0.0, ge=0, lt=1)  # synthetic
    kwargs: dict[str, Any] = Field(default_factory=dict)  # factory: its arguments; mnist1d: generation arguments

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and v not in DATASET_NAMES:
            raise ValueError(unknown("dataset", v, DATASET_NAMES, " (or data.factory)"))
        return v


class ModelConfig(_Model):
    """A model by name (or factory). Architecture keys left null take the model's own default; each model
    takes some of them (models.model_keys), and each may be searched as `model.KEY` in `space:`."""

    name: str | None = "cnn"  # a built-in model (the error lists them), or null with factory
    factory: str | None = None  # "package.module:function" returning an nn.Module
    channels: tuple[Int, ...] | None = None  # cnn: conv block widths (default 32, 64)
    hidden: Int | None = Field(None, ge=1)  # cnn: head width; mlp: layer width (default 128)
    depth: Int | None = Field(None, ge=1)  # mlp: hidden layers (2); resnet: 6n+2 layers (20); cnn1d: conv blocks (3)
    width: Int | None = Field(None, ge=1)  # resnet: first stage's channels, doubled per stage (16); cnn1d: channels
    arch: str | None = None  # torchvision / timm: a model name (torchvision.models, timm.list_models()), e.g. resnet18
    kwargs: dict[str, Any] = Field(default_factory=dict)  # extra builder arguments
    checkpoint: str | None = None  # a state dict every trial warm-starts from

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and v not in MODEL_NAMES:
            raise ValueError(unknown("model", v, MODEL_NAMES, " (or model.factory)"))
        return v

    @field_validator("channels")
    @classmethod
    def _channels(cls, v: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if v is not None and (not v or any(c < 1 for c in v)):
            raise ValueError(f"must be a non-empty list of positive integers; got {shown(list(v))}")
        return v


class ParamSpec(_Model):
    """One searched setting: float/int ranges, categorical choices, or bool; optional `when`."""

    type: Literal["float", "int", "categorical", "bool"]
    low: Float | None = None  # float, int: the range's lower bound
    high: Float | None = None  # float, int: the range's upper bound
    log: bool = False  # sample on a log scale
    step: Float | None = None  # float, int: sample on a grid of this step
    choices: tuple[Any, ...] | None = None  # categorical: the values
    when: dict[str, Any] | None = None  # {setting: value or [values]}: sampled only in trials where it holds

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
            self._check_range()
        elif self.type == "categorical":
            self._check_categorical()
        else:  # bool: the two values (_bool_choices); [false, true] is what to_dict() writes back: a stored
            # config round-trips
            if any(k is not None for k in (self.low, self.high, self.step)) or self.choices != (False, True):
                raise ValueError("type: bool takes no low/high/step/choices")
        return self

    def _check_range(self) -> None:
        """float and int: low < high (integers for int, > 0 with log), a positive step, no choices."""
        if self.low is None or self.high is None:
            raise ValueError("low: type float and int need low and high")
        for key in ("low", "high", "step"):
            v = getattr(self, key)
            if v is not None and not math.isfinite(v):  # (NaN passes every comparison; int(inf) overflows)
                raise ValueError(f"{key}: must be a finite number; got {v}")
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

    def _check_categorical(self) -> None:
        """categorical: distinct choices, none of the range keys."""
        if not self.choices:
            raise ValueError("choices: must be a non-empty list")
        if len(set(map(repr, self.choices))) != len(self.choices):
            raise ValueError(f"choices: must be distinct; got {shown(list(self.choices))}")
        if any(k is not None for k in (self.low, self.high, self.step)) or self.log:
            raise ValueError("type: low/high/step/log are for float and int, not categorical")


class Divergence(_Model):
    loss_factor: Float = Field(4.0, gt=1)  # an epoch's training loss above this x the first epoch's: diverged


class Slow(_Model):
    max_trial_seconds: Float | None = Field(None, gt=0)  # stop a trial projected to train longer than this
    vs_front: Float | None = Field(None, gt=1)  # stop one projected this factor slower than the slowest Pareto trial
    hang_seconds: Float | None = Field(None, gt=0)  # cap on a trial's wall time, wherever its code is
    # before training: stop a trial whose predicted time adds < this share of the front's hypervolume even at
    # the front's best quality + front_margin (pruners.check_front_gain)
    min_front_gain: Float | None = Field(None, gt=0, lt=1)
    front_margin: Float = Field(0.02, ge=0)  # min_front_gain's best case: the front's best accuracy + this


class PruningConfig(_Model):
    pruner: str = "auto"  # auto: median (one objective) or pareto_asha (several); none, or a pruner's name
    pruner_args: dict[str, Any] = Field(default_factory=dict)  # keyword arguments for the pruner
    divergence: Divergence | None = Divergence()  # null turns it off
    slow: Slow = Slow()  # projections of a trial's training time
    oom: Literal["prune", "retry_smaller_batch"] = "prune"  # retry_smaller_batch: retry once with half the batch
    # host memory the training process may hold (resident, MB); past it the trial stops as oom (null: only the
    # machine's own limit, less a safety margin)
    max_host_memory_mb: Float | None = Field(None, gt=0)  # (true is not 1 MB)
    # several objectives: the sampler sees a trial stopped after epoch k as the completed trial with epochs: k where
    # that is true (epochs searched, a constant learning rate, no compression); search/credit.py, bench/RESULTS.md
    stopped_as_shorter: bool = True

    @field_validator("pruner")
    @classmethod
    def _pruner(cls, v: str) -> str:
        if v not in ("auto", *PRUNER_NAMES):
            raise ValueError(unknown("pruner", v, ["auto", *PRUNER_NAMES]))
        return v


class FastestWithin(_Model):
    fastest_within: Float = Field(ge=0, lt=1)


class MostAccurateUnder(_Model):
    most_accurate_under_s: Float = Field(gt=0)


class Constraints(_Model):
    max_accuracy_drop: Float | None = Field(None, ge=0, lt=1)  # compression may cost at most this much accuracy
    # max_METRIC: a trial whose METRIC ends above this is infeasible (never on the front nor recommended)
    max_peak_memory_mb: Float | None = Field(None, gt=0)  # also stops a trial whose peak crosses it mid-training
    max_energy_j: Float | None = Field(None, gt=0)  # needs an energy counter where the study runs

    def caps(self) -> dict[str, float]:
        """metric -> the most it may reach: each `max_METRIC` set, METRIC a catalogued metric (not accuracy_drop,
        a difference of two)."""
        return {k[len("max_"):]: float(v) for k, v in self if v is not None and k[len("max_"):] in CATALOGUE}


class DistillConfig(_Model):
    """Knowledge distillation: train the model against a teacher's softened predictions too."""

    teacher: str  # a state dict (e.g. from `autotune best FILE --save-model PATH`), or "best"
    teacher_study: str | None = None  # with teacher: best, the study whose recommended trial teaches
    teacher_model: ModelConfig | None = None  # the teacher's architecture; default: the `model` section
    alpha: Float = Field(0.5, ge=0, le=1)  # weight of the distillation term (1 - alpha: the label loss)
    temperature: Float = Field(4.0, gt=0)  # T: the softened predictions' temperature


class MlflowConfig(_Model):
    """Log the study to MLflow (autotune[mlflow]): one parent run, one nested run per trial."""

    tracking_uri: str = ""  # default: $MLFLOW_TRACKING_URI, else sqlite:///studies/mlflow.db
    experiment: str = ""  # default: the study's name


class TrackingConfig(_Model):
    mlflow: MlflowConfig | None = None  # log the study to MLflow


class RunConfig(_Model):
    study: StudyConfig = StudyConfig()  # the Optuna study: name, storage, sampler, budget
    task: Literal["classification", "regression"] = "classification"  # regression: val_mse, val_mae, val_r2
    objectives: tuple[Objective, ...] = (  # one: single-objective; two or more: a Pareto study
        Objective(metric="val_accuracy"),
        Objective(metric="train_time_s"),
    )
    data: DataConfig = DataConfig()  # the dataset, from disk or a factory
    model: ModelConfig = ModelConfig()  # the model, by name or factory
    train: dict[str, Any] = Field(default_factory=dict)  # fixed trainer settings (the settings catalogue)
    space: dict[str, ParamSpec] = Field(default_factory=dict)  # searched settings: fixed or searched, never both
    pruning: PruningConfig = PruningConfig()  # how trials stop early
    select: str | FastestWithin | MostAccurateUnder = "knee"  # which trial is recommended
    constraints: Constraints = Constraints()  # limits a trial must meet to be feasible
    distill: DistillConfig | None = None  # knowledge distillation from a teacher model
    trainer: str | None = None  # "package.module:function": a user's training function fit(ctx)
    metrics: tuple[str, ...] = ()  # further metrics that function may ctx.report (beyond the objectives)
    tracking: TrackingConfig = TrackingConfig()  # where else the study is logged
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
        raise ValueError(f"must be knee, {{fastest_within: F}} or {{most_accurate_under_s: S}}; got {shown(v)}")

    @property
    def file(self) -> str:
        """The run file's name, as every message about it starts (`p.yaml: key: rule`; `<config>` for a dict)."""
        return Path(self.source).name

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def directions(self) -> list[Literal["maximize", "minimize"]]:
        """Each objective's direction: config's checks gave every one a direction (a built-in metric's own)."""
        out: list[Literal["maximize", "minimize"]] = []
        for o in self.objectives:
            if o.direction is None:
                raise ValueError(f"objective {o.metric} has no direction")
            out.append(o.direction)
        return out

    def fixed(self) -> dict[str, Any]:
        """Every trainer setting that is not searched: defaults overlaid with `train:` (user parameters too)."""
        return {k: v for k, v in merge(self.train).items() if k not in self.space}

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
