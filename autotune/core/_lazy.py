"""A package's public face without its cost: `__getattr__` (PEP 562) that imports each public name from its
private module on first use. Importing one module of a package runs the package's __init__; with these faces
that never imports the package's other modules (torch, Optuna, scipy stay unloaded for the commands that need
none of them, and no import cycle can start in an __init__)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: `names` maps each public name to its private module (`_context`)."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__


__all__ = ["exports"]
