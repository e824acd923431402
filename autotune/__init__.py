"""autotune: one Optuna study over hyper-parameters, acceleration, initialization and compression.

Public API (see DESIGN.md): `load_config`, `run`, `train`, and the types they return or raise: `TuneResult`,
`TrainResult`, `TrialSummary`, `EpochRecord`, `TrialContext` (what a training function `fit(ctx)` receives),
`AutotuneError`, `ConfigError`, `TrialStopped`, `ContextMisuse`. A file is a `str` or any `os.PathLike`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.fit._trainer import Fit
    from autotune.observe._result import TuneResult
    from autotune.search._results import TrialSummary
    from autotune.spec._schema import RunConfig
    from autotune.training._context import ContextMisuse, EpochRecord, TrainResult, TrialContext

from autotune.core._errors import AutotuneError, ConfigError, TrialStopped
from autotune.core._lazy import exports
from autotune.core._version import __version__

File = str | os.PathLike[str]  # a run file's path


def load_config(path: File, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read and validate a YAML run file; `overrides` are dotted keys, e.g. {"study.n_trials": 10}."""
    from autotune.config._load import load

    return load(os.fspath(path), overrides)


def _config(cfg: RunConfig | File) -> RunConfig:
    return load_config(cfg) if isinstance(cfg, (str, os.PathLike)) else cfg


def run(cfg: RunConfig | File, fit: Fit | None = None, *, fresh: bool = False) -> TuneResult:
    """Run (or resume) the study a config (or run file) describes and return its result. `fit`: your training
    function `fit(ctx)` (default: the config's `trainer:`, else the built-in trainer); `fresh`: start over."""
    from autotune.observe import _tracking as tracking
    from autotune.observe._result import TuneResult
    from autotune.study._study import run as _run

    cfg = _config(cfg)
    # `tracking: {mlflow: ...}` in the config: the tracker (checked now) logs the run as one of its callbacks
    return TuneResult.of(_run(cfg, fresh=fresh, fit=fit, callbacks=tracking.callbacks(cfg)))


def train(cfg: RunConfig | File, params: dict[str, Any] | None = None, *, fit: Fit | None = None,
          seed: int | None = None) -> TrainResult:
    """Train one configuration outside any study: fixed settings plus `params` (user parameters as
    `user.NAME`), the same training function, settings and clocks as a trial. `seed` (default: the seed the
    study's trial 0 trains with: `study.trial_seed`, else study.seed x 100003)."""
    from autotune.fit._train_one import train as _train

    return _train(_config(cfg), params, fit=fit, seed=seed)


# imported on first use (core/_lazy.py): `import autotune` stays light (no torch, no Optuna)
__getattr__ = exports(__name__, {
    "TuneResult": "observe._result", "TrainResult": "training._context", "TrialContext": "training._context",
    "EpochRecord": "training._context", "ContextMisuse": "training._context", "TrialSummary": "search._results",
})


__all__ = ["AutotuneError", "ConfigError", "ContextMisuse", "EpochRecord", "TrainResult", "TrialContext",
           "TrialStopped", "TrialSummary", "TuneResult", "__version__", "load_config", "run", "train"]
