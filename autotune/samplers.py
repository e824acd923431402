"""The sampler registry: `study.sampler` name -> builder of an Optuna sampler.

The config's allowed sampler names are this mapping's keys (config.py asks here); `make_sampler`
builds the one a config names, with autotune's defaults where Optuna's do not suit a short study.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from . import space
from .config import RunConfig
from .errors import ConfigError, lookup

TPE_STARTUP_TRIALS = 8  # random trials before TPE's model: a study here is tens of trials, not hundreds

SamplerBuilder = Callable[[RunConfig, "int | None", dict[str, Any]], optuna.samplers.BaseSampler]


def _tpe(cfg: RunConfig, seed: int | None, args: dict[str, Any]) -> optuna.samplers.BaseSampler:
    args.setdefault("n_startup_trials", TPE_STARTUP_TRIALS)
    return optuna.samplers.TPESampler(seed=seed, **args)


def _random(cfg: RunConfig, seed: int | None, args: dict[str, Any]) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed, **args)


def _gp(cfg: RunConfig, seed: int | None, args: dict[str, Any]) -> optuna.samplers.BaseSampler:
    return optuna.samplers.GPSampler(seed=seed, **args)


def _cmaes(cfg: RunConfig, seed: int | None, args: dict[str, Any]) -> optuna.samplers.BaseSampler:
    # Categorical parameters fall back to random sampling inside CMA-ES: say nothing, it is documented.
    args.setdefault("warn_independent_sampling", False)
    return optuna.samplers.CmaEsSampler(seed=seed, **args)


def _nsga2(cfg: RunConfig, seed: int | None, args: dict[str, Any]) -> optuna.samplers.BaseSampler:
    return optuna.samplers.NSGAIISampler(seed=seed, **args)


def _qmc(cfg: RunConfig, seed: int | None, args: dict[str, Any]) -> optuna.samplers.BaseSampler:
    args.setdefault("warn_independent_sampling", False)
    return optuna.samplers.QMCSampler(seed=seed, **args)


def _grid(cfg: RunConfig, seed: int | None, args: dict[str, Any]) -> optuna.samplers.BaseSampler:
    return optuna.samplers.GridSampler(space.grid(cfg), seed=seed, **args)


SAMPLERS: dict[str, SamplerBuilder] = {
    "tpe": _tpe, "random": _random, "gp": _gp, "cmaes": _cmaes, "nsga2": _nsga2, "qmc": _qmc, "grid": _grid,
}


def make_sampler(cfg: RunConfig, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The sampler `study.sampler` names, seeded with `seed` (a worker's own stream), else `study.seed`; bad
    `sampler_args` are a ConfigError."""
    file = Path(cfg.source).name
    build = lookup(SAMPLERS, cfg.study.sampler, file, "study.sampler", "sampler")
    try:
        return build(cfg, cfg.study.seed if seed is None else seed, dict(cfg.study.sampler_args))
    except (TypeError, ValueError, ImportError) as e:
        raise ConfigError(file, "study.sampler_args", f"{cfg.study.sampler}: {e}") from None
