"""The sampler registry: `study.sampler` name -> `SamplerKind` (its builder and what it can do, as data).

The config's allowed sampler names are this mapping's keys, and its checks read each kind's capabilities (the
studies it can search, how it proposes, the parameters it takes) from here (config/checks.py asks), as does
`study.candidates` (predicted.py: candidates are drawn from a sampler that proposes a parameter at a time).
`samplers.make_sampler` builds the one a config names. A new sampler is its name in spec/names.py and its row here.
It sits below predicted.py and samplers.py, which both read it (samplers.py wraps what it builds with predicted.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import optuna

from autotune.search import space
from autotune.spec import RunConfig

TPE_STARTUP_TRIALS = 8  # random trials before TPE's model: a study here is tens of trials, not hundreds

SamplerBuilder = Callable[[RunConfig, "int | None", dict[str, Any]], optuna.samplers.BaseSampler]


def _optuna(cls: Callable[..., optuna.samplers.BaseSampler], **defaults: Any) -> SamplerBuilder:
    """A builder of Optuna's sampler `cls`: autotune's `defaults` under the config's `sampler_args`."""
    return lambda cfg, seed, args: cls(seed=seed, **{**defaults, **args})


def _grid(cfg: RunConfig, seed: int | None, args: dict[str, Any]) -> optuna.samplers.BaseSampler:
    return optuna.samplers.GridSampler(space.grid(cfg), seed=seed, **args)


@dataclass(frozen=True)
class SamplerKind:
    """A registered sampler: its builder `(cfg, seed, args)` and what it can do. `objectives`: the studies it can
    search (one objective only, or any); `proposes`: a parameter at a time (TPE, random: study.candidates can draw
    whole candidates from it) or whole points; `grid`: it walks a fixed grid (categorical, bool or stepped
    parameters only; a stopped trial teaches it nothing)."""

    build: SamplerBuilder
    objectives: Literal["one", "any"] = "any"
    proposes: Literal["parameter", "point"] = "point"
    grid: bool = False


SAMPLERS: dict[str, SamplerKind] = {
    "tpe": SamplerKind(_optuna(optuna.samplers.TPESampler, n_startup_trials=TPE_STARTUP_TRIALS),
                       proposes="parameter"),
    "random": SamplerKind(_optuna(optuna.samplers.RandomSampler), proposes="parameter"),
    "gp": SamplerKind(_optuna(optuna.samplers.GPSampler)),
    # categorical parameters fall back to random sampling inside CMA-ES and QMC: say nothing, it is documented
    "cmaes": SamplerKind(_optuna(optuna.samplers.CmaEsSampler, warn_independent_sampling=False), objectives="one"),
    "nsga2": SamplerKind(_optuna(optuna.samplers.NSGAIISampler)),
    "qmc": SamplerKind(_optuna(optuna.samplers.QMCSampler, warn_independent_sampling=False)),
    "grid": SamplerKind(_grid, grid=True),
}


__all__ = ["SAMPLERS", "TPE_STARTUP_TRIALS", "SamplerBuilder", "SamplerKind"]
