"""autotune: one Optuna study over hyper-parameters, acceleration, initialization and compression.

Public API (see docs/design.md): `load_config`, `run`, `train`, and the types they return or raise: `TuneResult`,
`TrainResult`, `TrialSummary`, `EpochRecord`, `TrialContext` (what a training function `fit(ctx)` receives),
`AutotuneError`, `ConfigError`, `TrialStopped`, `ContextMisuse`. A file is a `str` or any `os.PathLike`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import threading

    from autotune.fit import Fit
    from autotune.observe import TuneResult
    from autotune.search import TrialSummary
    from autotune.spec import RunConfig
    from autotune.training import ContextMisuse, EpochRecord, TrainResult, TrialContext

from autotune.core import AutotuneError, ConfigError, TrialStopped, __version__

File = str | os.PathLike[str]  # a run file's path


def load_config(path: File, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read and validate a YAML run file; `overrides` are dotted keys, e.g. {"study.n_trials": 10}."""
    from autotune.config import load

    return load(os.fspath(path), overrides)


def _config(cfg: RunConfig | File) -> RunConfig:
    return load_config(cfg) if isinstance(cfg, (str, os.PathLike)) else cfg


def run(cfg: RunConfig | File, fit: Fit | None = None, *, fresh: bool = False,
        cancel: threading.Event | None = None) -> TuneResult:
    """Run (or resume) the study a config (or run file) describes and return its result. `fit`: your training
    function `fit(ctx)` (default: the config's `trainer:`, else the built-in trainer); `fresh`: start over;
    `cancel`: a `threading.Event` that stops the run when set, from any thread (the way to stop a run on a thread
    other than the main one, which Ctrl-C never reaches): the trial it is on is recorded interrupted, and the
    result of the trials so far is returned."""
    from autotune.observe import TuneResult, tracking
    from autotune.study import run as _run

    cfg = _config(cfg)
    # `tracking: {mlflow: ...}` in the config: the tracker (checked now) logs the run as one of its callbacks
    return TuneResult(study=_run(cfg, fresh=fresh, fit=fit, callbacks=tracking.callbacks(cfg), cancel=cancel),
                      config=cfg)


def train(cfg: RunConfig | File, params: dict[str, Any] | None = None, *, fit: Fit | None = None,
          seed: int | None = None) -> TrainResult:
    """Train one configuration outside any study: fixed settings plus `params` (user parameters as
    `user.NAME`), the same training function, settings and clocks as a trial. `seed` (default: the seed the
    study's trial 0 trains with: `study.trial_seed`, else study.seed x 100003)."""
    from autotune.fit import train as _train

    return _train(_config(cfg), params, fit=fit, seed=seed)


# imported on first use (PEP 562): `import autotune` stays light (no torch, no Optuna)
_LAZY = {"TuneResult": "autotune.observe", "TrainResult": "autotune.training", "TrialContext": "autotune.training",
         "EpochRecord": "autotune.training", "ContextMisuse": "autotune.training", "TrialSummary": "autotune.search"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)


__all__ = ["AutotuneError", "ConfigError", "ContextMisuse", "EpochRecord", "TrainResult", "TrialContext",
           "TrialStopped", "TrialSummary", "TuneResult", "__version__", "load_config", "run", "train"]
