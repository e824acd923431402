"""The training function a config names (`trainer:`), loaded, and its name as messages give it.

What a study's trial, `autotune.train`, `autotune profile` and `autotune speed` share; nothing here knows Optuna.
"""

from __future__ import annotations

from autotune.core import load_factory
from autotune.fit import trainer
from autotune.spec import RunConfig


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


__all__ = ["fit_name", "load_fit"]
