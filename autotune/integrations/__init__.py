"""Framework adapters: tune the training people already have (a Hugging Face `Trainer`: `integrations.hf`; a
`LightningModule`: `integrations.lightning`) through the trial context, with its settings, clocks and stop rules.
Each adapter is a `fit(ctx)` for `trainer:` in the YAML; its framework is an optional extra (`pip install
'autotune[hf]'`, `'autotune[lightning]'`), imported only by the adapter's module."""

from __future__ import annotations

from autotune.integrations.common import (
    BUILTIN_ONLY,
    BY_CONTEXT,
    FrameworkLoop,
    check_table,
    record_not_applicable,
    record_received,
    require,
)

__all__ = ["BUILTIN_ONLY", "BY_CONTEXT", "FrameworkLoop", "check_table", "record_not_applicable", "record_received",
           "require"]
