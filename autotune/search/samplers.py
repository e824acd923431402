"""The sampler registry: `study.sampler` name -> `SamplerKind` (its builder and what it can do, as data).

The config's allowed sampler names are this mapping's keys, and its checks read each kind's capabilities (the
studies it can search, how it proposes, the parameters it takes) from here (config/checks.py asks); `make_sampler`
builds the one a config names, with autotune's defaults where Optuna's do not suit a short study. A new sampler is
its name in spec/names.py and its row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import optuna

from autotune.core import ConfigError, lookup
from autotune.search import predicted, space
from autotune.search.credit import EPOCHS, StoppedAsShorter
from autotune.spec import RunConfig, Settings, per_epoch

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


def make_sampler(cfg: RunConfig, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The sampler `study.sampler` names, seeded with `seed` (a worker's own stream), else `study.seed`; bad
    `sampler_args` are a ConfigError."""
    file = cfg.file
    kind = lookup(SAMPLERS, cfg.study.sampler, file, "study.sampler", "sampler")
    try:
        sampler = kind.build(cfg, cfg.study.seed if seed is None else seed, dict(cfg.study.sampler_args))
    except (TypeError, ValueError, ImportError) as e:
        raise ConfigError(file, "study.sampler_args", f"{cfg.study.sampler}: {e}") from None
    if teaches(cfg):
        sampler = StoppedAsShorter(sampler, lambda params: Settings(space.split(space.fixed_point(cfg, params))[0]))
    return predicted.wrap(sampler, cfg, cfg.study.seed if seed is None else seed)


def teaches(cfg: RunConfig) -> bool:
    """Whether the study's sampler is shown stopped trials as the shorter trials they equal (search/credit.py): several
    objectives, every one known after each epoch, epochs searched, and `pruning.stopped_as_shorter`."""
    return (cfg.multi_objective and cfg.pruning.stopped_as_shorter and EPOCHS in cfg.space
            and all(per_epoch(o.metric) for o in cfg.objectives) and not SAMPLERS[cfg.study.sampler].grid)
