"""Lightning through the trial context: `fit(ctx, module, datamodule)` trains a user's `LightningModule` with the
trial's settings mapped onto Lightning's own arguments, the context's clocks and its stop rules.

    from autotune.integrations import lightning as tune_lightning

    def fit(ctx):                                  # trainer: my_script:fit in the YAML
        tune_lightning.fit(ctx, MyModule(width=ctx.params["width"]), MyDataModule())

What maps where is `TABLE` (every setting of the catalogue, checked by a test): precision, accumulation, clipping,
`benchmark` and the epochs become `Trainer` arguments; batch size, data fraction and the DataLoader's settings
rebuild the training and validation DataLoaders over the user's datasets; init, channels_last and compile are
`ctx.prepare(module)`'s; the optimizer is autotune's (configure_optimizers returns it, with the lr schedule as a
per-step scheduler), or the module's own with `own_optimizer=True`. A Trainer argument is applied when the built
Trainer holds it (Lightning turns fp16 into bf16 on a CPU: then precision fp16 is recorded not applied).

The clocks: a `Callback` opens each epoch's clock at `on_train_epoch_start` and marks each training batch's end,
so the epoch's training time ends with its last batch: validation, checkpoint saving and logging after it are
not training (nor the sanity check before the first epoch). Each validation's metrics (`trainer.callback_metrics`,
those the study knows) are `ctx.report`ed, where the stop rules act: a stop raises the context's `TrialStopped`
out of `trainer.fit` (the trial ends PRUNED with its reason, multi-objective too), early stopping sets
`trainer.should_stop`. Lightning is an optional extra (`pip install 'autotune[lightning]'`), imported on use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from autotune.core import ONE_DEVICE, ConfigError
from autotune.integrations.common import FrameworkLoop
from autotune.spec import SETTINGS, applied_by
from autotune.training import ContextMisuse, TrialContext

EXTRA = "pip install 'autotune[lightning]'"
PRECISIONS = {"fp32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}

# setting -> where Lightning (or the DataLoader autotune builds for it) takes it
TABLE: dict[str, str] = {
    "precision": "Trainer(precision=): fp32 32-true, bf16 bf16-mixed, fp16 16-mixed",
    "grad_accum_steps": "Trainer(accumulate_grad_batches=)",
    "grad_clip": "Trainer(gradient_clip_val=) (0: None)",
    "cudnn_benchmark": "Trainer(benchmark=)",
    "epochs": "Trainer(max_epochs=)",
    "batch_size": "the training DataLoader's batch_size",
    "data_fraction": "a seeded random share of the training dataset",
    "eval_batch_size": "the validation DataLoader's batch_size",
    "num_workers": "the training DataLoader's num_workers",
    "pin_memory": "the training DataLoader's pin_memory",
    "prefetch_factor": "the training DataLoader's prefetch_factor (num_workers > 0)",
    "persistent_workers": "the training DataLoader's persistent_workers (num_workers > 0)",
    "optimizer": "configure_optimizers returns autotune's optimizer",
    "lr": "autotune's optimizer (own_optimizer=True: your groups' lrs scaled by it)",
    "momentum": "autotune's optimizer",
    "weight_decay": "autotune's optimizer",
    "lr_schedule": "configure_optimizers' lr_scheduler, stepped every optimizer step",
    "init": "ctx.prepare(module): weight init",
    "channels_last": "ctx.prepare(module): memory format",
    "compile": "ctx.prepare(module): torch.compile; trainer.fit gets the compiled module",
    "compile_mode": "ctx.prepare(module): torch.compile's mode",
}
NOT_APPLICABLE: dict[str, str] = {
    "data_on_device": "Lightning's loop moves each batch to the device itself: no device-resident dataset",
}
# Applied by the trial context whatever trains (around the trial, its stop rules, its clocks), unless mapped.
BY_CONTEXT = tuple(k for k in applied_by("around", "stop", "clock") if k not in TABLE)
# Your LightningModule's own: applied when it reads them (ctx.settings.label_smoothing in its loss).
YOURS = applied_by("loss", "model", "augment")
# The built-in trainer's steps after training: refused for any training function at validation.
BUILTIN_ONLY = applied_by("after", "checkpoint")
# Trainer arguments autotune sets: a user's own value for one would silently lose to (or beat) the searched one.
TRAINER_ARGS = ("precision", "accumulate_grad_batches", "gradient_clip_val", "benchmark", "max_epochs",
                "accelerator", "devices")


def uncovered() -> list[str]:
    """The catalogue's settings the table leaves out or lists twice, and names it has that the catalogue lacks."""
    covered = [*TABLE, *NOT_APPLICABLE, *BY_CONTEXT, *YOURS, *BUILTIN_ONLY]
    return sorted({k for k in SETTINGS if covered.count(k) != 1} | (set(covered) - set(SETTINGS)))


def _lightning() -> Any:
    try:
        import lightning.pytorch as pl
    except ImportError:
        raise ConfigError(None, "trainer", f"the Lightning integration needs lightning: {EXTRA}") from None
    return pl


def fit(ctx: TrialContext, module: Any, datamodule: Any = None, *, train_dataloaders: Any = None,
        val_dataloaders: Any = None, own_optimizer: bool = False, **trainer_kwargs: Any) -> None:
    """Train `module` (a LightningModule) for this trial with `lightning.Trainer(**trainer_kwargs)` plus the
    trial's settings (TABLE), on the datasets of `datamodule` (or of the given loaders), with the context's clocks
    and stop rules. `own_optimizer=True` keeps the module's configure_optimizers (a chosen lr scales its lrs)."""
    pl = _lightning()
    st = ctx.state
    taken = sorted(set(trainer_kwargs) & set(TRAINER_ARGS))
    if taken:
        raise ContextMisuse(f"Trainer argument(s) {', '.join(taken)} come from the trial's settings (train: or "
                            "space: in the YAML): leave them out of autotune.integrations.lightning.fit")
    if int(st.raw["devices"]) > 1:
        raise ContextMisuse("the Lightning integration trains on one device: devices must be 1")
    train, val = _user_loaders(pl, datamodule, train_dataloaders, val_dataloaders)
    train = _train_loader(ctx, train)
    val = _eval_loader(ctx, val)
    mine = _own_optimizers(module) if own_optimizer else None
    model, opt = ctx.prepare(module, None if mine is None else mine[0])
    args = _trainer_args(ctx)
    bridge = _bridge_class(pl)(ctx)
    kwargs = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
              "enable_model_summary": False, **trainer_kwargs, **args}
    kwargs["callbacks"] = [*(trainer_kwargs.get("callbacks") or []), bridge]
    trainer = pl.Trainer(**kwargs)
    _record_received(ctx, args, trainer)
    bridge.steps_per_epoch = _batches(len(train), trainer.limit_train_batches)  # (the schedule's length, the probe's)
    _install_optimizers(ctx, module, opt, mine, bridge.steps_per_epoch)
    trainer.fit(model, train_dataloaders=train, val_dataloaders=val)
    bridge.finish()


setattr(fit, ONE_DEVICE, "the Lightning integration")  # (a fit calling it with devices > 1: refused at validation)


def _batches(n: int, limit: int | float) -> int:
    """The training batches of an epoch under Trainer(limit_train_batches=) (Lightning's rule: a count or a share)."""
    if isinstance(limit, int) and not isinstance(limit, bool):
        return max(1, min(n, limit))
    return max(1, int(n * float(limit)))


def _user_loaders(pl: Any, datamodule: Any, train: Any, val: Any) -> tuple[Any, Any]:
    """The user's training and validation DataLoaders: the datamodule's (set up for fit), or those given."""
    if datamodule is not None:
        datamodule.prepare_data()
        datamodule.setup("fit")
        train = datamodule.train_dataloader()
        # (Lightning's own val_dataloader raises: a datamodule that does not define one has no validation data)
        own_val = type(datamodule).val_dataloader is not pl.LightningDataModule.val_dataloader
        val = datamodule.val_dataloader() if own_val else None
    if not isinstance(train, torch.utils.data.DataLoader):
        raise ContextMisuse("autotune.integrations.lightning.fit needs the training data as a DataLoader (from "
                            f"a LightningDataModule's train_dataloader, or train_dataloaders=); got {type(train)}")
    return train, val


def _train_loader(ctx: TrialContext, loader: Any) -> torch.utils.data.DataLoader:
    """The user's training dataset in a DataLoader of the trial's batch size, data fraction and loader settings."""
    s, st = ctx.settings, ctx.state
    ds = loader.dataset
    if isinstance(ds, torch.utils.data.IterableDataset):
        raise ContextMisuse("the Lightning integration needs a map-style training dataset (it shuffles and takes "
                            "data_fraction of it); got an IterableDataset")
    if s.data_fraction < 1.0:
        g = torch.Generator().manual_seed(ctx.seed)
        keep = max(1, int(len(ds) * float(s.data_fraction)))
        ds = torch.utils.data.Subset(ds, torch.randperm(len(ds), generator=g)[:keep].tolist())
    workers = int(s.num_workers)
    kw: dict[str, Any] = {"batch_size": int(s.batch_size), "shuffle": True, "num_workers": workers,
                          "pin_memory": bool(s.pin_memory), "collate_fn": loader.collate_fn,
                          "drop_last": bool(st.raw["compile"]) and len(ds) > int(s.batch_size)}
    if workers:
        kw.update(prefetch_factor=int(s.prefetch_factor), persistent_workers=bool(s.persistent_workers))
    else:
        for key in ("prefetch_factor", "persistent_workers"):
            if key in st.chosen:
                st.not_applied[key] = "with num_workers 0 the DataLoader has no worker processes"
    if "data_on_device" in st.chosen:
        st.not_applied["data_on_device"] = NOT_APPLICABLE["data_on_device"]
    return torch.utils.data.DataLoader(ds, **kw)


def _eval_loader(ctx: TrialContext, loader: Any) -> Any:
    """The validation dataset in order, batched by eval_batch_size (a non-DataLoader is passed as it is)."""
    if not isinstance(loader, torch.utils.data.DataLoader):
        return loader
    return torch.utils.data.DataLoader(loader.dataset, batch_size=int(ctx.settings.eval_batch_size), shuffle=False,
                                       collate_fn=loader.collate_fn, num_workers=loader.num_workers)


def _own_optimizers(module: Any) -> tuple[torch.optim.Optimizer, Any]:
    """The module's configure_optimizers(): (its first optimizer, what it returned)."""
    out = module.configure_optimizers()
    first = out
    while not isinstance(first, torch.optim.Optimizer):
        if isinstance(first, Mapping) and "optimizer" in first:
            first = first["optimizer"]
        elif isinstance(first, (list, tuple)) and first:
            first = first[0]
        else:
            raise ContextMisuse(f"own_optimizer=True: configure_optimizers returned no optimizer ({type(out)})")
    return first, out


def _install_optimizers(ctx: TrialContext, module: Any, opt: torch.optim.Optimizer, mine: Any,
                        steps_per_epoch: int) -> None:
    """configure_optimizers returns what ctx.prepare settled: autotune's optimizer with the trial's lr schedule
    (a scheduler Lightning steps after each optimizer step), or the module's own as it returned them."""
    if mine is not None:
        out = mine[1]
        if "lr_schedule" in ctx.state.chosen:
            ctx.state.not_applied["lr_schedule"] = ("own_optimizer=True: your configure_optimizers' scheduler, or "
                                                    "none, sets the lr")
    else:
        stepper = ctx.state.stepper
        stepper.steps_per_epoch = steps_per_epoch
        sched = stepper.make_schedule()  # (None: constant)
        stepper.decided = True  # the schedule is decided: Lightning steps it
        out = opt if sched is None else {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
    module.configure_optimizers = lambda: out  # (on the instance: the user's class is untouched)


def _trainer_args(ctx: TrialContext) -> dict[str, Any]:
    """The Trainer arguments the trial's settings give (read unwatched: applied once the Trainer holds them)."""
    raw, dev = ctx.state.raw, ctx.device
    clip = float(raw["grad_clip"])
    return {
        "precision": PRECISIONS[str(raw["precision"])], "accumulate_grad_batches": int(raw["grad_accum_steps"]),
        "gradient_clip_val": clip if clip > 0 else None, "benchmark": bool(raw["cudnn_benchmark"]),
        "max_epochs": int(raw["epochs"]),
        "accelerator": {"cuda": "gpu"}.get(dev.type, dev.type),
        "devices": [dev.index or 0] if dev.type == "cuda" else 1,
    }


RECEIVED = {"precision": "precision", "grad_accum_steps": "accumulate_grad_batches",
            "grad_clip": "gradient_clip_val", "cudnn_benchmark": "benchmark", "epochs": "max_epochs"}


def held(trainer: Any) -> dict[str, Any]:
    """What the built Trainer holds for each argument autotune set (benchmark: the cudnn flag it set)."""
    return {"precision": trainer.precision, "accumulate_grad_batches": trainer.accumulate_grad_batches,
            "gradient_clip_val": trainer.gradient_clip_val, "benchmark": torch.backends.cudnn.benchmark,
            "max_epochs": trainer.max_epochs}


def _record_received(ctx: TrialContext, args: Mapping[str, Any], trainer: Any) -> None:
    """A mapped Trainer argument is applied when the Trainer holds the value given; else not applied, saying what
    Lightning made of it (fp16 on a CPU becomes bf16-mixed)."""
    st, got = ctx.state, held(trainer)
    for key, arg in RECEIVED.items():
        if got[arg] == args[arg]:
            st.reads.add(key)
        elif key in st.chosen:
            st.not_applied[key] = f"Lightning's Trainer holds {arg}={got[arg]!r}, not {args[arg]!r}"


def _first_tensor(batch: Any) -> torch.Tensor | None:
    if isinstance(batch, torch.Tensor):
        return batch
    items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ()
    for item in items:
        found = _first_tensor(item)
        if found is not None:
            return found
    return None


def _bridge_class(pl: Any) -> type:
    """The Callback class (Lightning is imported only on use, so the class is made here)."""

    class ContextBridge(_Bridge, pl.Callback):  # (ours first: Callback's hooks are no-ops)
        pass

    return ContextBridge


class _Bridge:
    """Lightning's loop seen by the trial context, through the FrameworkLoop the HF Trainer's callback uses too:
    epochs opened by ctx.epochs() (at the first epoch's start), each training batch counted and timed (the
    epoch's training ends with its last), each validation at an epoch's end reported to the stop rules."""

    def __init__(self, ctx: TrialContext) -> None:
        self.loop = FrameworkLoop(ctx)
        self.steps_per_epoch = 1  # (set once the Trainer says how many batches an epoch trains)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if not self.loop.started:
            self.loop.start(self.steps_per_epoch)  # (ctx.prepare built the model and optimizer)
        if not self.loop.epoch_begin():  # early stopping ended the context's epochs
            trainer.should_stop = True

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.loop.batch_begin()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self.loop.ctx.state.clock.running:
            return
        x = _first_tensor(batch)
        n = len(x) if x is not None and x.ndim else 1
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor):  # (Lightning divided it by the accumulation: the batch's own mean)
            accum = trainer.accumulate_grad_batches
            self.loop.step(n, loss.detach() * accum if accum > 1 else loss)
        else:  # (manual optimization returning nothing: samples counted, no loss)
            self.loop.step(n, torch.zeros((), device=self.loop.ctx.device), has_loss=False)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        # (a validation inside the epoch, val_check_interval < 1, is not the epoch's: its training goes on)
        if trainer.sanity_checking or not trainer.is_last_batch:
            return
        metrics = {k: v for k, v in trainer.callback_metrics.items() if k != "train_loss" and _scalar(v)}
        if self.loop.report(metrics):
            trainer.should_stop = True

    def finish(self) -> None:
        """trainer.fit returned: the last epoch closes (an unreported one keeps its clocks); no epoch opens."""
        if not self.loop.finish():
            raise ContextMisuse("trainer.fit trained no epoch (max_epochs, max_steps or the data left none)")


def _scalar(v: Any) -> bool:
    return isinstance(v, (int, float)) or (isinstance(v, torch.Tensor) and v.numel() == 1)


__all__ = ["BUILTIN_ONLY", "BY_CONTEXT", "NOT_APPLICABLE", "TABLE", "TrialContext", "YOURS", "fit", "held", "uncovered"]
