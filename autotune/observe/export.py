"""`autotune best --export`: the recommended trial as a runnable YAML with every setting fixed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autotune.core import redact
from autotune.search import TrialSummary, space
from autotune.spec import MODEL_PREFIX, SETTINGS, USER_PREFIX, RunConfig


def best_yaml(cfg: RunConfig, best: TrialSummary) -> dict[str, Any]:
    """The config with the trial's settings fixed in `train:` and its searched model keys (`model.KEY`)
    fixed in `model:`; `space:` empty; `study.trial_seed` the trial's seed and `cpu_threads` the torch threads
    autotune chose for it (a cap after an oversubscribed trial, less one per loader worker): its one trial trains
    as it did.
    Searched settings the trial did not apply are left out (they keep their defaults), and so are the `data:`
    and `model:` sections a training function of the user's (`trainer:`) does not read, unless the file set them."""
    settings = space.of_trial(cfg, best.settings, best.params)
    # every setting the trial chose (searched or fixed), even at the catalogue's default: one it did not choose is
    # the user's recipe under a framework's loop (the Trainer's linear schedule, not autotune's constant)
    train = {k: v for k, v in settings.items()
             if (k in SETTINGS and (v != SETTINGS[k].default or k in best.params) or k in cfg.train
                 or k.startswith(USER_PREFIX)) and k not in best.not_applied}
    if best.cpu_threads_used is not None:  # the threads it really trained on (a cap, loader workers): as it did
        train["cpu_threads"] = best.cpu_threads_used
    doc = cfg.to_dict()
    doc["study"] = {**doc["study"], "name": f"{cfg.study.name}-best", "n_trials": 1}
    if best.seed is not None:
        doc["study"]["trial_seed"] = best.seed
    if redact(cfg.study.storage) != cfg.study.storage:  # a password never goes into a file people share
        del doc["study"]["storage"]
    doc["train"] = train
    arch = {k[len(MODEL_PREFIX):]: v for k, v in settings.items() if k.startswith(MODEL_PREFIX)}
    known = {k: v for k, v in arch.items() if k in doc["model"]}
    extra = {k: v for k, v in arch.items() if k not in doc["model"]}  # a factory's own arguments
    doc["model"] = {**doc["model"], **known, "kwargs": {**doc["model"].get("kwargs", {}), **extra}}
    doc["space"] = {}
    doc.pop("source", None)
    if cfg.trainer is not None:  # the user's function builds its own data and model
        for section in ("data", "model"):
            if section not in cfg.model_fields_set:
                doc.pop(section, None)
    return doc


def render(cfg: RunConfig, best: TrialSummary, doc: dict[str, Any]) -> str:
    """The YAML text of `doc` (a `best_yaml`), headed by the trial it came from."""
    header = f"# trial {best.number} of study {cfg.study.name}: " + ", ".join(
        f"{k} {v:.4g}" for k, v in best.values.items()) + "\n"
    if "storage" not in doc["study"]:
        header += (f"# study.storage ({redact(cfg.study.storage)}) holds a password and is left out: this file "
                   "runs on the default SQLite file; give --storage URL to use the server\n")
    note = best.lr_note()
    if note is not None:  # the lr written below is that multiplier: the export trains at these same rates
        header += f"# {note}: lr below is that multiplier, not a rate\n"
    if best.recipe:  # not fixed below: the user's code (or the framework's defaults) decides them again
        header += f"# left to your code, as the trial left them (not set below): {best.recipe_text()}\n"
    if cfg.trainer is not None and cfg.source != "<config>":  # a module found next to the original YAML
        header += f"# trainer {cfg.trainer}: found next to {cfg.source}, in the working folder or on the path\n"
    return header + yaml.safe_dump(doc, sort_keys=False)


def export_best(cfg: RunConfig, best: TrialSummary, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(cfg, best, best_yaml(cfg, best)))
    return path
