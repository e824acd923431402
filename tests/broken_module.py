"""A user module that fails when imported (referenced from tests/configs/factory_import_raises.yaml)."""

SETTINGS = {"width": 16}
WIDTH = SETTINGS["depth"]  # KeyError at import time


def build(input_shape: tuple[int, ...], n_classes: int) -> None:
    return None
