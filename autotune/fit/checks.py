"""Everything that can be wrong with a config before anything trains, as one ConfigError line: the device, a fixed
precision, several devices, sampler and pruner, the data, the model, augmentation and compression settings.

Run before a study (or a worker) starts, by `autotune.train`, `autotune profile` and `autotune speed`.
"""

from __future__ import annotations

from typing import Any

from autotune.core import AutotuneError, ConfigError, adapter_mark, describe_exception, load_factory, warn_config
from autotune.search import pruners, samplers, space
from autotune.spec import RunConfig, Settings
from autotune.training import accel, augment, data, distributed, models


def preflight(cfg: RunConfig) -> None:
    """Everything that can be wrong before a trial runs: device, fixed precision, data, model."""
    file = cfg.file
    fixed = cfg.fixed()
    try:
        dev = accel.resolve_device(fixed["device"])
    except AutotuneError as e:
        raise ConfigError(file, "train.device", str(e)) from None
    if "precision" not in cfg.space:
        why = accel.precision_error(str(dev), fixed["precision"])
        if why is not None:
            raise ConfigError(file, "train.precision", f"{fixed['precision']} cannot run on {dev}: {why}; "
                                                       f"use fp32 or search precision")
    distributed.check(cfg)
    samplers.make_sampler(cfg)
    pruners.optuna_pruner(cfg)
    pruners.pareto_pruner(cfg)
    if cfg.trainer is not None:
        return  # a user's training function brings its own data and model
    try:
        ds = data.load(cfg.data, cfg.source, cfg.task)
    except AutotuneError:
        raise
    except Exception as e:  # a user's data factory or a damaged file: one line naming it, not a traceback
        key, what = ("data.factory", f"{cfg.data.factory} raised") if cfg.data.factory else \
            ("data.path", f"cannot read {cfg.data.path}:") if cfg.data.path else ("data", f"{cfg.data.name}:")
        raise ConfigError(file, key, f"{what} {describe_exception(e)}") from None
    _check_augment(cfg, ds.input_shape, file)
    _check_batch_size(cfg, len(ds.y_train), file)
    try:
        point = Settings(space.split(space.fixed_point(cfg, {}))[0])
        models.build_for(cfg.model, point, ds.input_shape, ds.n_outputs, 0.0, "default", file)
    except AutotuneError:
        raise
    except Exception as e:
        key, what = ("model.factory", f"{cfg.model.factory} raised") if cfg.model.factory else ("model", "failed:")
        raise ConfigError(file, key, f"cannot build the model for input {ds.input_shape}: {what} "
                                     f"{describe_exception(e)}") from None
    from autotune import compress  # fixed compression settings that cannot run here

    compress.check_config(cfg)


def notes(cfg: RunConfig) -> list[str]:
    """What a valid config may not mean what it seems to, said at validation and at a run's start (not errors).

    A searched `lr` with `trainer:` is the learning rate only for the searched optimizer (`ctx.prepare(model)`);
    on an optimizer the fit builds itself it multiplies each group's own lr. Which one a fit does is known only
    once it runs, so the note comes when the range does not hold 1.0 (a multiplier's range holds it; 1e-3..1e-2
    as a multiplier would shrink the fit's own rates a hundred- to a thousand-fold)."""
    spec = cfg.space.get("lr")
    if cfg.trainer is None or spec is None:
        return []
    table = _adapter(cfg)
    if _trains_searched_optimizer(cfg, table):
        return []
    values = list(spec.choices) if spec.choices is not None else [spec.low, spec.high]
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if numbers and min(numbers) <= 1.0 <= max(numbers):
        return []
    rates = "each trial's rates are stored as user attr effective_lrs"
    if table is not None:  # a framework adapter whose lr multiplies the module's own optimizer (Lightning)
        return [f"{cfg.file}: space.lr: with trainer: {cfg.trainer}, {table.name} trains your module's own "
                "optimizer (configure_optimizers) unless optimizer is searched or fixed too, and lr multiplies each "
                "of its parameter groups' lr (search it around 1.0 then, e.g. 0.25 to 4.0, or choose optimizer "
                f"to search the learning rate itself); {rates}"]
    return [f"{cfg.file}: space.lr: with trainer: {cfg.trainer}, lr is the learning rate only when "
            "your fit trains with the searched optimizer (ctx.prepare(model)); on an optimizer your fit builds and "
            "passes to ctx.prepare it multiplies each parameter group's own lr (search it around 1.0 then, e.g. "
            f"0.25 to 4.0); {rates}"]


def _adapter(cfg: RunConfig) -> Any:
    """The framework adapter's table the training function is marked with (integrations/tables.py), else None."""
    try:
        fn = load_factory(str(cfg.trainer), cfg.file, "trainer", near=cfg.source)
    except AutotuneError:
        return None
    return adapter_mark(fn)


def _trains_searched_optimizer(cfg: RunConfig, table: Any) -> bool:
    """The training function's adapter (`table`, a framework adapter of autotune.integrations) takes lr as the
    learning rate, or trains the searched optimizer when one is chosen: its lr is the learning rate."""
    if table is None:
        return False
    return bool(getattr(table, "lr_is_rate", False)) or "optimizer" in cfg.space or "optimizer" in cfg.train


def _check_augment(cfg: RunConfig, input_shape: tuple[int, ...], file: str) -> None:
    """Augmentation settings the data cannot take (image-only, a crop pad past the image side), fixed or
    at the largest value searched."""
    fixed = cfg.fixed()
    for key in augment.SETTINGS:
        spec = cfg.space.get(key)
        values = [fixed.get(key)] if spec is None else \
            [max(spec.choices)] if spec.choices is not None else [spec.high]
        why = augment.check(Settings({key: values[0]}), input_shape)
        if why is not None:
            raise ConfigError(file, f"space.{key}" if spec else f"train.{key}", why)


def _check_batch_size(cfg: RunConfig, n_train: int, file: str) -> None:
    """A batch larger than the training split trains every epoch on one short batch (the whole split): refused when
    the user fixed it or when every searched value is; a warning when some searched are, or when it is the default
    (a tiny image folder with the default 64 trains on all of it at once, as PyTorch would)."""
    fixed = cfg.fixed()
    fraction = float(fixed.get("data_fraction", 1.0)) if "data_fraction" not in cfg.space else 1.0
    n = max(1, int(round(n_train * fraction)))
    of = f"{n_train} samples" + (f" x data_fraction {fraction:g} = {n}" if fraction < 1.0 else "")
    spec = cfg.space.get("batch_size")
    if spec is None:
        bs = int(fixed["batch_size"])
        if bs > n and "batch_size" not in cfg.train:  # a default is not the user's choice: trained as PyTorch does
            warn_config(file, "train.batch_size", f"{bs} (the default) is larger than the training set ({of}): each "
                                                  f"epoch trains on all {n} samples as one batch; set "
                                                  "train.batch_size to choose")
        elif bs > n:
            raise ConfigError(file, "train.batch_size", f"{bs} is larger than the training set ({of}): every epoch "
                                                        f"would be one short batch; use at most {n}")
        return
    values = list(spec.choices or ()) if spec.type == "categorical" else [spec.low, spec.high]
    over = [int(v) for v in values if v is not None and v > n]
    if not over:
        return
    if len(over) == len(values) and (spec.type == "categorical" or values[0] is not None and values[0] > n):
        raise ConfigError(file, "space.batch_size", f"every value searched is larger than the training set ({of}); "
                                                    f"search values up to {n}")
    warn_config(file, "space.batch_size", f"{', '.join(map(str, over))} larger than the training set ({of}): a trial "
                                          "that samples it trains on one short batch per epoch")


__all__ = ["notes", "preflight"]
