"""Building the sampler a config names (`make_sampler`): its `SamplerKind`'s builder (sampler_kinds.py, the
registry), with autotune's defaults where Optuna's do not suit a short study, shown stopped trials as the shorter
trials they equal where that is true (credit.py), choosing among candidates where they apply (predicted.py).
"""

from __future__ import annotations

import optuna

from autotune.core import ConfigError, lookup
from autotune.search import predicted, space
from autotune.search.credit import EPOCHS, StoppedAsShorter
from autotune.search.sampler_kinds import SAMPLERS, TPE_STARTUP_TRIALS, SamplerKind
from autotune.spec import RunConfig, Settings, per_epoch


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


__all__ = ["SAMPLERS", "TPE_STARTUP_TRIALS", "SamplerKind", "make_sampler", "teaches"]
