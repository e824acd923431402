"""Framework adapters: tune the training people already have (Lightning: `autotune.integrations.lightning`)
through the trial context, with its settings, clocks and stop rules. Each adapter is called from a user's
`fit(ctx)` (`trainer:` in the YAML); its framework is an optional extra (`pip install 'autotune[lightning]'`),
imported only when the adapter trains, so nothing is imported here."""

from __future__ import annotations

__all__: list[str] = []
