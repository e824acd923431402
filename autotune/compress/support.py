"""What can run where: the inference device, compression settings this torch build or device cannot run
(a pruned trial, `unsupported`), and fixed settings that cannot work, found before any trial (`check_config`)."""

from __future__ import annotations

import copy
import functools
import itertools
from typing import Any

import torch
from torch import nn

from autotune.compress import quantize, transfer
from autotune.compress.quantize import CAST_DTYPES, INT8_MODES
from autotune.core import ConfigError, resolve_path
from autotune.spec import SETTINGS, RunConfig, Settings
from autotune.training import accel, data, models


def infer_device(settings: Settings, train_dev: torch.device) -> torch.device:
    """`infer_device: auto` is the training device, except int8, whose kernels exist on CPU only."""
    name = settings["infer_device"]
    if name == "auto":
        return torch.device("cpu") if settings["quantize"] in INT8_MODES else train_dev
    return accel.resolve_device(name)


def unsupported(settings: Settings, train_dev: torch.device) -> tuple[str, str] | None:
    """(setting, why) when this combination of compression settings cannot run here, else None."""
    q, qat, pm = settings["quantize"], settings["qat"], settings["prune_method"]
    if q in INT8_MODES:
        if quantize.quantized_engine() is None:
            return "quantize", f"{q} needs a quantized engine; this torch build has none (supported_engines is " \
                               f"{torch.backends.quantized.supported_engines})"
        dev = infer_device(settings, train_dev)
        if dev.type != "cpu":
            return "infer_device", f"{q} runs on CPU only (torch's int8 kernels); got infer_device {dev}"
    if qat:
        if q != "static_int8":
            return "qat", f"quantization-aware training produces a static int8 model: needs quantize static_int8; " \
                          f"got quantize {q}"
        if pm == "l1_unstructured" and settings["prune_amount"] > 0:
            return "qat", "qat with l1_unstructured is not supported: QAT fine-tuning would regrow the pruned " \
                          "weights; use ln_structured (its channels are cut out first) or post-training static_int8"
    if q in CAST_DTYPES:
        dev = infer_device(settings, train_dev)
        why = cast_error(str(dev), q)
        if why is not None:
            return "quantize", f"{q} inference on {dev}: {why}"
    return None


@functools.lru_cache(maxsize=8)
def cast_error(device_str: str, mode: str) -> str | None:
    """None if a conv+bn+linear forward runs in that dtype on that device, else why not."""
    dt = CAST_DTYPES[mode]
    dev = torch.device(device_str)
    try:
        m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 4 * 4, 3)).to(dev, dt).eval()
        with torch.inference_mode():
            m(torch.randn(2, 1, 4, 4, device=dev, dtype=dt))
    except Exception as e:  # the exact error differs by device and build
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def check_config(cfg: RunConfig) -> None:
    """Fixed compression settings that cannot work are a ConfigError before any trial runs (fit.preflight's
    compression part)."""
    file = cfg.file
    fixed = cfg.fixed()
    searched = set(cfg.space)
    try:
        dev = accel.resolve_device(fixed["device"])
        if fixed["infer_device"] != "auto":
            accel.resolve_device(fixed["infer_device"])
    except Exception as e:
        raise ConfigError(file, "train.infer_device", str(e)) from None
    freeze_set = "freeze" in searched or fixed["freeze"] != "none"
    if freeze_set and cfg.model.checkpoint is None:
        raise ConfigError(file, "space.freeze" if "freeze" in searched else "train.freeze",
                          "freeze needs model.checkpoint: freezing untrained layers keeps them random")
    _check_files(cfg, file, fixed, searched)
    _check_combinations(cfg, file, fixed, searched, dev)


def _check_files(cfg: RunConfig, file: str, fixed: dict[str, Any], searched: set[str]) -> None:
    """The teacher and the checkpoint are read now: one that is missing or does not fit fails here, not in
    every trial."""
    if cfg.distill is not None and cfg.distill.teacher == "best":
        pass  # resolved once the study is open (study.resolve_teacher): the best trial is trained then
    elif cfg.distill is not None:
        if not resolve_path(cfg.distill.teacher, cfg.source).is_file():
            raise ConfigError(file, "distill.teacher", f"no such file: {cfg.distill.teacher}")
        ds = data.load(cfg.data, cfg.source)
        transfer.load_teacher(cfg.distill, cfg.model, ds.input_shape, ds.n_classes, torch.device("cpu"), cfg.source)
    if cfg.model.checkpoint is not None:
        ds = data.load(cfg.data, cfg.source, cfg.task)
        model = models.build(cfg.model, ds.input_shape, ds.n_outputs, 0.0, "default", file)
        freezes = cfg.space["freeze"].choices or () if "freeze" in searched else (fixed["freeze"],)
        for freeze in freezes:
            transfer.load_checkpoint(copy.deepcopy(model), cfg.model.checkpoint, cfg.source, str(freeze))


def _check_combinations(cfg: RunConfig, file: str, fixed: dict[str, Any], searched: set[str],
                        dev: torch.device) -> None:
    """Every combination the space can draw (float ranges by their ends): if none can run, say so now;
    if some can, a drawn one that cannot becomes a pruned trial (stop_reason unsupported)."""
    options: dict[str, list[Any]] = {}
    for k in ("quantize", "qat", "prune_method", "prune_amount"):
        spec = cfg.space.get(k)
        options[k] = [fixed[k]] if spec is None else list(spec.choices) if spec.choices is not None else \
            [spec.low, spec.high]
    base = {k: v for k, v in fixed.items() if k in SETTINGS}  # (less the user's parameters)
    problems = [unsupported(Settings({**base, **dict(zip(options, values))}), dev)
                for values in itertools.product(*options.values())]
    if all(p is not None for p in problems):
        name, why = next(p for p in problems if p is not None)
        every = " (so does every combination the space can draw)" if len(problems) > 1 else ""
        raise ConfigError(file, f"{'space' if name in searched else 'train'}.{name}", why + every)
