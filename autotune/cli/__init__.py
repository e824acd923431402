"""The `autotune` command: one module per command."""

from __future__ import annotations

from autotune.cli.app import main

__all__ = ["main"]
