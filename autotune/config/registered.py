"""The names a run file may use, read from the registries when a config is checked."""

from __future__ import annotations

from typing import Any

# Each registry is a mapping next to its builders (sampler_kinds.py, pruners.py, data/registry.py, models.py). Those
# modules import this one, so their names are read when a config is validated, never copied here.


def sampler_names() -> list[str]:
    from autotune.search import SAMPLERS

    return list(SAMPLERS)


def sampler_kind(name: str) -> Any:
    """What a registered sampler can do (search.SamplerKind: objectives, proposes, grid); None: not registered."""
    from autotune.search import SAMPLERS

    return SAMPLERS.get(name)


def pruner_names(objectives: str | None = None) -> list[str]:
    """Registered pruners (`auto` first); `objectives` one or several: those a study with that many can use."""
    from autotune.search import PRUNERS

    if objectives is None:
        return ["auto", *PRUNERS]
    return [n for n, kind in PRUNERS.items() if kind.objectives in (objectives, "any")]


def dataset_names() -> list[str]:
    from autotune.training import DATASETS

    return list(DATASETS)


def dataset_task(name: str) -> str | None:
    """The task a built-in dataset's labels are for (None: either, the file decides)."""
    from autotune.training import DATASETS

    return DATASETS[name].task


def model_names() -> list[str]:
    from autotune.training import MODELS

    return list(MODELS)
