"""The contract of autotune/spec/names.py: each tuple of names is its registry's keys, in the registry's order.

The schema and the settings catalogue validate a run file against these tuples without importing the
registries (they live in packages above spec); this test is what keeps the two from drifting apart.
"""

from __future__ import annotations

import pytest

from autotune import compress
from autotune.compress import prune, transfer
from autotune.search import pruners, samplers
from autotune.spec import names
from autotune.spec.settings import SETTINGS
from autotune.training import models, optimizers
from autotune.training.data import registry as data

# tuple in spec/names.py -> (where its registry lives, the registry)
REGISTRIES = {
    "SAMPLER_NAMES": ("autotune.search.samplers.SAMPLERS", samplers.SAMPLERS),
    "PRUNER_NAMES": ("autotune.search.pruners.PRUNERS", pruners.PRUNERS),
    "DATASET_NAMES": ("autotune.training.data.registry.DATASETS", data.DATASETS),
    "MODEL_NAMES": ("autotune.training.models.MODELS", models.MODELS),
    "INIT_NAMES": ("autotune.training.models.INITS", models.INITS),
    "OPTIMIZER_NAMES": ("autotune.training.optimizers.OPTIMIZERS", optimizers.OPTIMIZERS),
    "SCHEDULE_NAMES": ("autotune.training.optimizers.SCHEDULES", optimizers.SCHEDULES),
    "QUANTIZER_NAMES": ("autotune.compress.QUANTIZERS", compress.QUANTIZERS),
    "PRUNE_METHOD_NAMES": ("autotune.compress.prune.PRUNE_METHODS", prune.PRUNE_METHODS),
    "FREEZER_NAMES": ("autotune.compress.transfer.FREEZERS", transfer.FREEZERS),
}

# setting in the catalogue -> the tuple its choices must be
SETTING_NAMES = {
    "optimizer": "OPTIMIZER_NAMES",
    "lr_schedule": "SCHEDULE_NAMES",
    "init": "INIT_NAMES",
    "quantize": "QUANTIZER_NAMES",
    "prune_method": "PRUNE_METHOD_NAMES",
    "freeze": "FREEZER_NAMES",
}


def test_every_tuple_in_names_has_a_registry_here() -> None:
    """A tuple added to names.py without a row above would go unchecked."""
    declared = sorted(k for k in vars(names) if k.endswith("_NAMES"))
    assert declared == sorted(REGISTRIES), "add the new tuple and its registry to REGISTRIES in this test"


@pytest.mark.parametrize("tuple_name", REGISTRIES)
def test_names_tuple_is_its_registrys_keys_in_order(tuple_name: str) -> None:
    where, registry = REGISTRIES[tuple_name]
    got = getattr(names, tuple_name)
    assert isinstance(got, tuple)
    assert got == tuple(registry), (
        f"autotune/spec/names.py: update {tuple_name} to {where}'s keys, in order: {tuple(registry)!r}")


@pytest.mark.parametrize("setting", SETTING_NAMES)
def test_catalogue_choices_are_the_names_tuple(setting: str) -> None:
    tuple_name = SETTING_NAMES[setting]
    assert SETTINGS[setting].kind == "choice"
    assert SETTINGS[setting].choices == getattr(names, tuple_name), (
        f"autotune/spec/settings.py: the {setting!r} setting must take names={tuple_name}")
    assert SETTINGS[setting].default in SETTINGS[setting].choices
