"""The `autotune` command: one module per command."""

from autotune.cli._main import main

__all__ = ["main"]
