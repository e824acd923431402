"""autotune: one Optuna study over hyper-parameters, acceleration, initialization and compression.

Public API (see DESIGN.md): `load_config`, `run`, `train`, `TrialContext`, `TuneResult`, `TrainResult`.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.fit._trainer import Fit
    from autotune.observe._result import TuneResult
    from autotune.spec._schema import RunConfig
    from autotune.training._context import TrainResult

from autotune.core._errors import AutotuneError, ConfigError


def load_config(path: str, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read and validate a YAML run file; `overrides` are dotted keys, e.g. {"study.n_trials": 10}."""
    from autotune.config._load import load

    return load(path, overrides)


def run(cfg: RunConfig | str, fit: Fit | None = None, fresh: bool = False) -> TuneResult:
    """Run (or resume) the study a config describes and return its result. `fit`: your training function
    `fit(ctx)` (default: the config's `trainer:`, else the built-in trainer)."""
    from autotune.observe import _tracking as tracking
    from autotune.observe._result import TuneResult
    from autotune.study._study import run as _run

    if isinstance(cfg, str):
        cfg = load_config(cfg)
    # `tracking: {mlflow: ...}` in the config: the tracker (checked now) logs the run as one of its callbacks
    return TuneResult.of(_run(cfg, fresh=fresh, fit=fit, callbacks=tracking.callbacks(cfg)))


def train(cfg: RunConfig | str, params: dict[str, Any] | None = None, seed: int | None = None,
          fit: Fit | None = None) -> TrainResult:
    """Train one configuration outside any study: fixed settings plus `params` (user parameters as
    `user.NAME`), the same training function, settings and clocks as a trial. `seed` (default: the seed the
    study's trial 0 trains with: `study.trial_seed`, else study.seed x 100003)."""
    from autotune.study._study import train_one

    if isinstance(cfg, str):
        cfg = load_config(cfg)
    return train_one(cfg, params, seed, fit)


def __getattr__(name: str) -> Any:
    if name == "TuneResult":
        from autotune.observe._result import TuneResult

        return TuneResult
    if name == "TrainResult":
        from autotune.training._context import TrainResult

        return TrainResult
    if name == "TrialContext":
        from autotune.training._context import TrialContext

        return TrialContext
    if name == "TrialSummary":
        from autotune.search._results import TrialSummary

        return TrialSummary
    raise AttributeError(name)


__all__ = ["AutotuneError", "ConfigError", "TrainResult", "TrialContext", "TrialSummary", "TuneResult", "load_config",
           "run", "train", "__version__"]
