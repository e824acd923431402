"""Framework adapters: tune the training people already have (a Hugging Face `Trainer`: `integrations.hf`; a
`LightningModule`: `integrations.lightning`) through the trial context, with its settings, clocks and stop rules.
Each adapter is a `fit(ctx)` for `trainer:` in the YAML; its framework is an optional extra (`pip install
'autotune[hf]'`, `'autotune[lightning]'`), imported only by the adapter's module. What each framework does with every
setting is its table (`tables`: one mapping each, the rest derived from the settings catalogue)."""

from __future__ import annotations

from autotune.integrations.common import quiet_frameworks, require
from autotune.integrations.tables import FRAMEWORKS, HF, LIGHTNING, Framework

__all__ = ["FRAMEWORKS", "Framework", "HF", "LIGHTNING", "quiet_frameworks", "require"]
