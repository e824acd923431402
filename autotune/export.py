"""`autotune best --export`: the recommended trial as a runnable YAML with every setting fixed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .config import RunConfig
from .results import TrialSummary
from .settings import SETTINGS


def best_yaml(cfg: RunConfig, best: TrialSummary) -> dict[str, Any]:
    settings = dict(best.settings) or {**cfg.fixed(), **best.params}
    train = {k: v for k, v in settings.items() if k in SETTINGS and v != SETTINGS[k].default or k in cfg.train}
    doc = cfg.to_dict()
    doc["study"] = {**doc["study"], "name": f"{cfg.study.name}-best", "n_trials": 1}
    doc["train"] = train
    doc["space"] = {}
    doc.pop("source", None)
    return doc


def render(cfg: RunConfig, best: TrialSummary, doc: dict[str, Any]) -> str:
    """The YAML text of `doc` (a `best_yaml`), headed by the trial it came from."""
    header = f"# trial {best.number} of study {cfg.study.name}: " + ", ".join(
        f"{k} {v:.4g}" for k, v in best.values.items()) + "\n"
    return header + yaml.safe_dump(doc, sort_keys=False)


def export_best(cfg: RunConfig, best: TrialSummary, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(cfg, best, best_yaml(cfg, best)))
    return path
