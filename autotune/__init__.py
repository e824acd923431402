"""autotune: one Optuna study over hyper-parameters, acceleration, initialization and compression.

Public API (see DESIGN.md): `load_config`, `run`, `train`, `TuneResult`, `TrainResult`.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import RunConfig
    from .study import TuneResult
    from .trainer import TrainResult

from .errors import AutotuneError, ConfigError


def load_config(path: str, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read and validate a YAML run file; `overrides` are dotted keys, e.g. {"study.n_trials": 10}."""
    from .config import load

    return load(path, overrides)


def run(cfg: RunConfig | str, fresh: bool = False) -> TuneResult:
    """Run (or resume) the study a config describes and return its result."""
    from .study import run as _run

    if isinstance(cfg, str):
        cfg = load_config(cfg)
    return _run(cfg, fresh=fresh)


def train(cfg: RunConfig | str, params: dict[str, Any] | None = None, seed: int | None = None) -> TrainResult:
    """Train one configuration outside any study: fixed settings plus `params`, same trainer and clocks."""
    from .objective import job_for
    from .settings import DEFAULTS, check_params
    from .study import preflight
    from .trainer import train as _train

    if isinstance(cfg, str):
        cfg = load_config(cfg)
    settings = {**DEFAULTS, **cfg.train, **check_params(params or {}, "params")}
    preflight(cfg)
    return _train(job_for(cfg, settings, cfg.study.seed or 0 if seed is None else seed, measure_inference=True))


def __getattr__(name: str) -> Any:
    if name == "TuneResult":
        from .study import TuneResult

        return TuneResult
    if name == "TrainResult":
        from .trainer import TrainResult

        return TrainResult
    if name == "TrialSummary":
        from .results import TrialSummary

        return TrialSummary
    raise AttributeError(name)


__all__ = ["AutotuneError", "ConfigError", "TrainResult", "TrialSummary", "TuneResult", "load_config", "run",
           "train", "__version__"]
