"""`autotune profile`: one configuration for a few epochs under torch.profiler.

Writes a Chrome trace (open in chrome://tracing or https://ui.perfetto.dev) and prints the
top operators and the share of step time spent waiting for input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from autotune.config import read_yaml
from autotune.core import ConfigError
from autotune.fit import load_fit, one_plan, preflight, trainer
from autotune.spec import RunConfig, check_params
from autotune.training import TrainResult


def read_params(path: Path) -> dict[str, Any]:
    """Settings from a YAML file: a plain mapping of settings, or a run file's `train:` section."""
    doc = read_yaml(path) or {}
    if not isinstance(doc, dict):
        raise ConfigError(path.name, "", "must be a mapping of settings")
    params = doc.get("train", doc) if "train" in doc else doc
    if not isinstance(params, dict):
        raise ConfigError(path.name, "train", "must be a mapping of settings")
    return check_params(params, path.name, "train." if "train" in doc else "")


def profile(cfg: RunConfig, params: dict[str, Any], epochs: int, out_dir: Path,
            row_limit: int = 15) -> tuple[TrainResult, Path, str]:
    preflight(cfg)  # a user's factory or data file that fails is one line here too, not a traceback
    # the plan autotune.train runs, for `epochs` (inference metrics only where the objectives need them)
    one = one_plan(cfg, {**params, "epochs": epochs}, measure_inference=None).training
    dev = one.device
    activities = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    out_dir.mkdir(parents=True, exist_ok=True)
    with torch.profiler.profile(activities=activities, record_shapes=False) as prof:
        result = trainer.train(one, load_fit(cfg))
    trace = out_dir / f"{cfg.study.name}-trace.json"
    prof.export_chrome_trace(str(trace))
    sort = "self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=row_limit)
    return result, trace, table
