"""`autotune best --export`: the recommended trial as a runnable YAML with every setting fixed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .config import RunConfig
from .errors import redact
from .results import TrialSummary
from .settings import SETTINGS


def best_yaml(cfg: RunConfig, best: TrialSummary) -> dict[str, Any]:
    settings = dict(best.settings) or {**cfg.fixed(), **best.params}
    train = {k: v for k, v in settings.items() if k in SETTINGS and v != SETTINGS[k].default or k in cfg.train}
    doc = cfg.to_dict()
    doc["study"] = {**doc["study"], "name": f"{cfg.study.name}-best", "n_trials": 1}
    if redact(cfg.study.storage) != cfg.study.storage:  # a password never goes into a file people share
        del doc["study"]["storage"]
    doc["train"] = train
    doc["space"] = {}
    doc.pop("source", None)
    return doc


def export_best(cfg: RunConfig, best: TrialSummary, path: Path) -> Path:
    doc = best_yaml(cfg, best)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = f"# trial {best.number} of study {cfg.study.name}: " + ", ".join(
        f"{k} {v:.4g}" for k, v in best.values.items()) + "\n"
    if "storage" not in doc["study"]:
        header += (f"# study.storage ({redact(cfg.study.storage)}) holds a password and is left out: this file "
                   "runs on the default SQLite file; give --storage URL to use the server\n")
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False))
    return path
