"""autotune's version: one place, below every layer (the root package, `--version`, `doctor`, error records)."""

__version__ = "0.1.0"
