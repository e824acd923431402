"""From a config and one point of its space to the trainer's job: the training function, the seed, the limits.

What a study's trial, `autotune.train`, `autotune profile` and `autotune speed` share; nothing here knows Optuna.
"""

from __future__ import annotations

from typing import Any

from autotune.core import INFERENCE, load_factory
from autotune.fit import trainer
from autotune.search import space
from autotune.spec import RunConfig
from autotune.training import Limits


def load_fit(cfg: RunConfig) -> trainer.Fit | None:
    """The user's training function named by `trainer:` (None: the built-in trainer)."""
    if cfg.trainer is None:
        return None
    return load_factory(cfg.trainer, cfg.file, "trainer", near=cfg.source)  # type: ignore


def fit_name(cfg: RunConfig, fit: trainer.Fit | None) -> str:
    if cfg.trainer is not None:
        return cfg.trainer
    if fit is None:
        return "the built-in trainer"
    return f"{getattr(fit, '__module__', '?')}:{getattr(fit, '__qualname__', type(fit).__name__)}"


def trial_seed(cfg: RunConfig, number: int) -> int:
    """The training seed of trial `number`: `study.trial_seed` + number when set (an exported trial's own seed:
    its one trial trains exactly as the original did), else study.seed x 100003 + number."""
    if cfg.study.trial_seed is not None:
        return cfg.study.trial_seed + number
    return (cfg.study.seed or 0) * 100_003 + number


def searched_keys(cfg: RunConfig, values: dict[str, Any]) -> frozenset[str]:
    """The space's keys this point searched: each one whose `when` holds (an inactive one kept its default)."""
    return frozenset(k for k, spec in cfg.space.items() if space.active(spec, values))


def job_for(cfg: RunConfig, values: dict[str, Any], seed: int, measure_inference: bool | None = None,
            fit: trainer.Fit | None = None, study_rules: bool = True, probe: Any = None,
            searched: frozenset[str] = frozenset(), fixed: frozenset[str] | None = None) -> trainer.TrainJob:
    """The trainer's job for these settings (and user parameters). Inference metrics (size, latency) cost a
    few timed forward passes per trial, so a study measures them only when an objective or constraint uses
    them. `study_rules`: the `pruning:` limits (divergence, slow, hang) apply, as they do in a study.
    `searched`: the keys a trial sampled (one nothing read is not_applied); `fixed`: the keys set explicitly
    (default: the config's `train:`)."""
    if measure_inference is None:
        measure_inference = any(o.metric in INFERENCE for o in cfg.objectives) or \
            cfg.constraints.max_accuracy_drop is not None
    settings, user = space.split(values)
    p = cfg.pruning
    limits = Limits(loss_factor=p.divergence.loss_factor if p.divergence is not None else None,
                    max_trial_seconds=p.slow.max_trial_seconds, hang_seconds=p.slow.hang_seconds,
                    max_peak_memory_mb=cfg.constraints.max_peak_memory_mb) \
        if study_rules else Limits()
    return trainer.TrainJob(
        config=cfg, settings=settings, seed=seed, limits=limits, measure_inference=measure_inference, fit=fit,
        user_params=user, probe=probe, searched=searched, fixed=frozenset(cfg.train) if fixed is None else fixed)

__all__ = ["fit_name", "job_for", "load_fit", "searched_keys", "trial_seed"]
