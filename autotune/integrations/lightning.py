"""Lightning through the trial context: `fit(ctx, module, datamodule)` trains a user's `LightningModule` with the
settings the trial chose mapped onto Lightning's own arguments (`tables.LIGHTNING`), the context's clocks and its
stop rules. The user's module, loaders and Trainer arguments are the baseline: a setting the trial did not choose
keeps the user's value or Lightning's default (the module's own optimizer and scheduler, the DataLoaders as they
are, `max_epochs`), and the trial records what each held (`recipe`).

    from autotune.integrations import lightning as tune_lightning

    def fit(ctx):                                  # trainer: my_script:fit in the YAML
        tune_lightning.fit(ctx, MyModule(width=ctx.params["width"]), MyDataModule(), max_epochs=10)

The DataModule itself is handed to `trainer.fit` (its hooks run, `trainer.datamodule` is set); for the trial its
`*_dataloader` methods are wrapped on the instance so that the loader settings shape what they return. What maps
where is the table: precision, accumulation, clipping, `benchmark` and the epochs become `Trainer` arguments; batch
size, data fraction and the DataLoader's settings rebuild the training DataLoader over the user's dataset (its
sampling kept), eval_batch_size the validation one; init, channels_last and compile are
`ctx.prepare(module)`'s; a chosen `optimizer` is autotune's (configure_optimizers returns it, at the module's own
lr, momentum and weight decay unless those are chosen too), else the module's own, whose group lrs a chosen `lr`
multiplies; a chosen `lr_schedule` is a per-step scheduler. A Trainer argument is applied when the built Trainer
holds it (Lightning turns fp16 into bf16 on a CPU: then precision fp16 is recorded not applied). With a mixed
precision and gradient clipping the optimizer autotune builds is not fused (Lightning cannot clip a fused one).

The clocks: a `Callback` opens each epoch's clock at `on_train_epoch_start` and marks each training batch's end,
so the epoch's training time ends with its last batch: validation, checkpoint saving and logging after it are
not training (nor the sanity check before the first epoch). An epoch that validated reports its values at the
training epoch's end (`trainer.callback_metrics`, those the study knows; one step's values left out) to the stop
rules; the first report must hold the study's objectives (else the run stops, naming what the module logged). A
stop raises the context's `TrialStopped` out of `trainer.fit` (the trial ends PRUNED with its reason,
multi-objective too), early stopping sets `trainer.should_stop`. Lightning is an optional extra (`pip install
'autotune[lightning]'`), imported on use.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from autotune.core import ADAPTER, ONE_DEVICE, ConfigError
from autotune.integrations import framework_compat as compat
from autotune.integrations.common import quiet_frameworks, record_cannot
from autotune.integrations.lightning_cli import as_callbacks, train_cli
from autotune.integrations.tables import LIGHTNING
from autotune.training import ContextMisuse, TrialContext, TrialPort, refuse_devices

EXTRA = "pip install 'autotune[lightning]'"
# Trainer arguments that follow the trial's device (the context's, around every trial): the user's would disagree.
DEVICE_ARGS = ("accelerator", "devices")
LOADER_KEYS = tuple(k for k, a in LIGHTNING.mapped.items() if a.on == "train_loader")
MIXED = ("bf16-mixed", "16-mixed", "bf16", "16", 16)


def _lightning() -> Any:
    try:
        import lightning.pytorch as pl
    except ImportError:
        raise ConfigError(None, "trainer", f"the Lightning integration needs lightning: {EXTRA}") from None
    return pl


def fit(ctx: TrialContext, module: Any, datamodule: Any = None, *, train_dataloaders: Any = None,
        val_dataloaders: Any = None, own_optimizer: bool | None = None, **trainer_kwargs: Any) -> None:
    """Train `module` (a LightningModule) for this trial with `lightning.Trainer(**trainer_kwargs)` changed by the
    settings the trial chose, on the datasets of `datamodule` (or of the given loaders), with the context's clocks
    and stop rules. `own_optimizer`: None (default) keeps the module's configure_optimizers unless the trial chose
    `optimizer`; True always keeps it; False always trains with autotune's optimizer."""
    pl = _lightning()
    refuse_devices(ctx, "Lightning")
    taken = sorted(set(trainer_kwargs) & set(DEVICE_ARGS))
    if taken:
        raise ContextMisuse(f"Trainer argument(s) {', '.join(taken)} follow the trial's device (`device` in the "
                            "YAML): leave them out of autotune.integrations.lightning.fit")
    port = TrialPort(ctx, "Lightning")
    port.fresh(module, "autotune.integrations.lightning.fit")  # (a module an earlier trial trained: said here)
    record_cannot(port, LIGHTNING)
    args = _trainer_args(port, trainer_kwargs)
    given = {**trainer_kwargs, **args}
    # (Lightning's mixed-precision plugin cannot clip a fused optimizer)
    fused = not (str(given.get("precision", "32-true")) in map(str, MIXED) and
                 float(given.get("gradient_clip_val") or 0) > 0)
    mine = _own_optimizers(module)
    keep = own_optimizer if own_optimizer is not None else not port.applied.chose("optimizer")
    if keep:
        if port.applied.chose("lr") and mine[2] is not None:  # (so ctx.prepare does not scale lrs a scheduler holds)
            port.applied.cannot("lr", "your configure_optimizers' scheduler holds your optimizer's lrs: a chosen lr "
                                "cannot multiply them (choose optimizer to train with autotune's)", chosen_only=True)
        model, opt = ctx.prepare(module, mine[0])
        _record_own(port, mine[0], mine[2])
    else:
        recipe = _optimizer_recipe(mine[0])
        for key, value in recipe.items():
            port.applied.left_to_recipe(key, value)
        model, opt = ctx.prepare(module, port.optimizer_factory(fused, **recipe))
        port.applied.left_to_recipe("lr_schedule", "none" if mine[2] is None else
                    f"none (your {type(mine[2]).__name__} steps your own optimizer, not autotune's)")
    bridge = _bridge_class(pl)(port)
    kwargs = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
              "enable_model_summary": False, **given, "accelerator": _accelerator(ctx.device),
              "devices": [ctx.device.index or 0] if ctx.device.type == "cuda" else 1}
    kwargs["callbacks"] = [*as_callbacks(pl, trainer_kwargs.get("callbacks")), bridge]
    with quiet_frameworks():
        trainer = pl.Trainer(**kwargs)
    _record_received(port, args, trainer)
    _install_optimizers(port, module, opt, mine[1] if keep else None, bridge, trainer)
    holder = datamodule if datamodule is not None else module if train_dataloaders is None else None
    if holder is not None:  # the DataModule (or the module's own data hooks) runs as it is, its loaders the trial's
        with _trial_loaders(pl, port, bridge, trainer, holder), quiet_frameworks():
            trainer.fit(model, datamodule=datamodule)
    else:
        train = _train_loader(port, _checked(train_dataloaders))
        bridge.loaded(trainer, train)
        with quiet_frameworks():
            trainer.fit(model, train_dataloaders=train, val_dataloaders=_eval_loader(port, val_dataloaders))
    bridge.finish()


@contextmanager
def _trial_loaders(pl: Any, port: TrialPort, bridge: Any, trainer: Any, holder: Any) -> Iterator[None]:
    """The DataModule's (or, without one, the LightningModule's own) train_dataloader / val_dataloader, for this
    trial, return the trial's loaders: each wrapped on the instance (Lightning calls them after its own prepare_data
    and setup, as it would), the user's class untouched and the instance's own attributes restored after."""
    base = pl.LightningDataModule if isinstance(holder, pl.LightningDataModule) else pl.LightningModule
    if type(holder).train_dataloader is base.train_dataloader:
        raise ContextMisuse("autotune.integrations.lightning.fit needs training data: a LightningDataModule, "
                            "train_dataloaders=, or a LightningModule that defines train_dataloader")

    def train() -> Any:
        loader = _train_loader(port, _checked(own_train()))
        bridge.loaded(trainer, loader)
        return loader

    def val() -> Any:
        return _eval_loader(port, own_val())

    own_train, own_val = holder.train_dataloader, holder.val_dataloader
    wrapped = {"train_dataloader": train}
    if type(holder).val_dataloader is not base.val_dataloader:  # (Lightning's own raises)
        wrapped["val_dataloader"] = val
    before = {name: vars(holder)[name] for name in wrapped if name in vars(holder)}
    for name, fn in wrapped.items():
        setattr(holder, name, fn)
    try:
        yield
    finally:
        for name in wrapped:
            if name in before:
                setattr(holder, name, before[name])
            else:
                delattr(holder, name)


setattr(fit, ONE_DEVICE, LIGHTNING.integration)  # (a fit calling it with devices > 1: refused at validation)
setattr(fit, ADAPTER, LIGHTNING)  # validation reads what Lightning cannot apply


def cli(ctx: TrialContext, model_class: Any = None, datamodule_class: Any = None, *, args: Any = None,
        own_optimizer: bool | None = None, **cli_kwargs: Any) -> None:
    """Train a LightningCLI program: `LightningCLI(model_class, datamodule_class, **cli_kwargs)`'s module, DataModule
    and Trainer arguments (its trainer_defaults, its seed) through `fit` (see autotune.integrations.lightning_cli)."""
    train_cli(_lightning(), fit, ctx, model_class, datamodule_class, args=args, own_optimizer=own_optimizer,
              **cli_kwargs)


setattr(cli, ONE_DEVICE, LIGHTNING.integration)
setattr(cli, ADAPTER, LIGHTNING)


def _accelerator(dev: torch.device) -> str:
    return {"cuda": "gpu"}.get(dev.type, dev.type)


def _batches(n: int, limit: int | float) -> int:
    """The training batches of an epoch under Trainer(limit_train_batches=) (Lightning's rule: a count or a share)."""
    if isinstance(limit, int) and not isinstance(limit, bool):
        return max(1, min(n, limit))
    return max(1, int(n * float(limit)))


def _epochs(trainer: Any, steps_per_epoch: int) -> int:
    """The epochs the Trainer will train (max_epochs; its max_steps' share when that ends it first; Lightning's
    default 1000 when neither is set)."""
    epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else 1000
    if trainer.max_steps is not None and trainer.max_steps > 0:
        accum = max(1, int(trainer.accumulate_grad_batches))
        epochs = min(epochs, -(-trainer.max_steps * accum // steps_per_epoch))
    return max(1, epochs)


def _checked(train: Any) -> torch.utils.data.DataLoader:
    """The user's training data: a DataLoader (from the DataModule's train_dataloader, or train_dataloaders=)."""
    if not isinstance(train, torch.utils.data.DataLoader):
        raise ContextMisuse("autotune.integrations.lightning.fit needs the training data as a DataLoader (from "
                            f"a LightningDataModule's train_dataloader, or train_dataloaders=); got {type(train)}")
    return train


def _train_loader(port: TrialPort, loader: torch.utils.data.DataLoader) -> torch.utils.data.DataLoader:
    """The user's training DataLoader as it is, unless the trial chose a loader setting: then the same dataset,
    sampling (shuffled or in order), collate_fn and drop_last in a DataLoader of the chosen values (the user's for
    the others)."""
    s = port.plan.settings
    held = {k: LIGHTNING.mapped[k].held(loader) for k in LOADER_KEYS}
    workers = int(s.num_workers if port.applied.chose("num_workers") else loader.num_workers)
    if not workers:
        for key in ("prefetch_factor", "persistent_workers"):
            port.applied.cannot(key, "with num_workers 0 the DataLoader has no worker processes", chosen_only=True)
            held.pop(key)
    for key, value in held.items():
        port.applied.left_to_recipe(key, value)
    chosen = [k for k in LOADER_KEYS if port.applied.chose(k)]
    if not chosen:
        return loader
    ds = loader.dataset
    why = _not_rebuildable(loader)
    if why is not None:
        for key in chosen:
            port.applied.cannot(key, why, chosen_only=True)
        return loader
    if s.data_fraction < 1.0 and port.applied.chose("data_fraction"):
        g = torch.Generator().manual_seed(port.plan.seed)
        keep = max(1, int(len(ds) * float(s.data_fraction)))
        ds = torch.utils.data.Subset(ds, torch.randperm(len(ds), generator=g)[:keep].tolist())
    bs = int(s.batch_size) if port.applied.chose("batch_size") else int(loader.batch_size)
    kw: dict[str, Any] = {
        "batch_size": bs, "shuffle": isinstance(loader.sampler, torch.utils.data.RandomSampler),
        "num_workers": workers, "collate_fn": loader.collate_fn,
        "pin_memory": bool(s.pin_memory) if port.applied.chose("pin_memory") else loader.pin_memory,
        "drop_last": loader.drop_last or (bool(s["compile"]) and len(ds) > bs)}  # (a short last batch recompiles)
    if workers:
        kw["prefetch_factor"] = int(s.prefetch_factor) if port.applied.chose("prefetch_factor") else \
            loader.prefetch_factor
        kw["persistent_workers"] = bool(s.persistent_workers) if port.applied.chose("persistent_workers") else \
            loader.persistent_workers
    for key in chosen:
        port.applied.received(key, True)
    return torch.utils.data.DataLoader(ds, **kw)


def _not_rebuildable(loader: torch.utils.data.DataLoader) -> str | None:
    """Why the user's training DataLoader cannot be rebuilt with other batch settings (its own sampler)."""
    if isinstance(loader.dataset, torch.utils.data.IterableDataset):
        return "your training dataset is an IterableDataset: its DataLoader is kept as it is"
    if loader.batch_size is None or not isinstance(loader.sampler, (torch.utils.data.RandomSampler,
                                                                    torch.utils.data.SequentialSampler)):
        return "your training DataLoader has a sampler of its own: it is kept as it is"
    return None


def _eval_loader(port: TrialPort, loader: Any) -> Any:
    """The validation DataLoader as it is, or (eval_batch_size chosen) the same in batches of that size."""
    if not isinstance(loader, torch.utils.data.DataLoader):
        return loader
    if not port.applied.chose("eval_batch_size") or loader.batch_size is None:
        port.applied.left_to_recipe("eval_batch_size", loader.batch_size)
        return loader
    port.applied.received("eval_batch_size", True)
    return torch.utils.data.DataLoader(loader.dataset, batch_size=int(port.plan.settings.eval_batch_size),
                                       shuffle=False, collate_fn=loader.collate_fn, num_workers=loader.num_workers)


def _own_optimizers(module: Any) -> tuple[torch.optim.Optimizer, Any, Any]:
    """The module's configure_optimizers(): (its first optimizer, what it returned, its first scheduler or None)."""
    out = module.configure_optimizers()
    first, sched = out, None
    while not isinstance(first, torch.optim.Optimizer):
        if isinstance(first, Mapping) and "optimizer" in first:
            config = first.get("lr_scheduler")
            sched = config.get("scheduler") if isinstance(config, Mapping) else config
            first = first["optimizer"]
        elif isinstance(first, (list, tuple)) and len(first) == 2 and isinstance(first[1], (list, tuple)):
            sched = first[1][0] if first[1] else None  # ([optimizers], [schedulers])
            first = first[0]
        elif isinstance(first, (list, tuple)) and first:
            first = first[0]
        else:
            raise ContextMisuse(f"configure_optimizers returned no optimizer ({type(out)})")
    if isinstance(sched, Mapping):
        sched = sched.get("scheduler")
    return first, out, sched


def _optimizer_recipe(opt: torch.optim.Optimizer) -> dict[str, float]:
    """The module's own optimizer's lr, weight decay and momentum: what autotune's optimizer takes unless chosen."""
    d = opt.defaults
    out = {"lr": float(d["lr"]), "weight_decay": float(d.get("weight_decay", 0.0) or 0.0)}
    if isinstance(d.get("momentum"), (int, float)) and 0 <= d["momentum"] < 1:
        out["momentum"] = float(d["momentum"])
    return out


def _record_own(port: TrialPort, opt: torch.optim.Optimizer, sched: Any) -> None:
    """The module's own optimizer and scheduler, trained as they are: the recipe's optimizer settings."""
    port.applied.left_to_recipe("optimizer", f"{type(opt).__name__} (your configure_optimizers)")
    for key, value in _optimizer_recipe(opt).items():
        if key != "lr" or not port.applied.chose("lr"):
            port.applied.left_to_recipe(key, value)
    port.applied.left_to_recipe("lr_schedule", f"{type(sched).__name__} (your configure_optimizers)"
                                if sched is not None else "none (your configure_optimizers)")


def _install_optimizers(port: TrialPort, module: Any, opt: torch.optim.Optimizer, mine: Any, bridge: Any,
                        trainer: Any) -> None:
    """configure_optimizers returns what ctx.prepare settled: the module's own as it returned them (a chosen
    lr_schedule replacing its scheduler), or autotune's optimizer with the trial's lr schedule (a scheduler
    Lightning steps after each optimizer step, spanning the batches the training loader gives: Lightning calls
    configure_optimizers before it loads the training data, so the schedule loads it first, as Lightning's own
    `trainer.estimated_stepping_batches` does)."""

    def configure() -> Any:
        if mine is not None and not port.applied.chose("lr_schedule"):
            return mine
        if bridge.steps_per_epoch is None:
            _ = trainer.estimated_stepping_batches  # (loads the training DataLoader: bridge.loaded)
        sched = port.schedule(bridge.steps_per_epoch)  # (None: constant)
        return opt if sched is None else {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    module.configure_optimizers = configure  # (on the instance: the user's class is untouched)


def _trainer_args(port: TrialPort, user: Mapping[str, Any]) -> dict[str, Any]:
    """The Trainer arguments of the settings the trial chose (the user's own for the others)."""
    out: dict[str, Any] = {}
    for key, a in LIGHTNING.mapped.items():
        if a.on == "trainer" and port.applied.chose(key):
            out.update(a.to(port.plan.settings[key], user))
    return out


def _record_received(port: TrialPort, args: Mapping[str, Any], trainer: Any) -> None:
    """A chosen Trainer argument is applied when the Trainer holds the value given; else not applied, saying what
    Lightning made of it (fp16 on a CPU becomes bf16-mixed). The others: the recipe's, as the Trainer holds them."""
    got = {"benchmark": torch.backends.cudnn.benchmark}  # (the flag Lightning set from Trainer(benchmark=))
    for key, a in LIGHTNING.mapped.items():
        if a.on != "trainer":
            continue
        (arg, wanted), = a.to(port.plan.settings[key], None).items()
        held = got.get(arg, getattr(trainer, arg, None))
        if port.applied.chose(key):
            port.applied.received(key, held == args.get(arg, wanted),
                          f"Lightning's Trainer holds {arg}={held!r}, not {args.get(arg, wanted)!r}")
        elif key != "epochs":  # (the epochs: the bridge's, once known)
            port.applied.left_to_recipe(key, a.held(trainer) if arg != "benchmark" else bool(held))


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
    """Lightning's loop seen by the trial context, through its port: epochs opened by ctx.epochs() (at the first
    epoch's start), each training batch counted and timed (the epoch's training ends with its last), an epoch that
    validated reported to the stop rules at its end."""

    def __init__(self, port: TrialPort) -> None:
        self.port = port
        self.steps_per_epoch: int | None = None  # (set once the training DataLoader is loaded)
        self.epochs = 1  # (the Trainer's own count: the trial's when it did not choose epochs)
        self.validated = False  # the epoch's validation ran (reported at the epoch's end)

    def loaded(self, trainer: Any, train: torch.utils.data.DataLoader) -> None:
        """The training DataLoader the Trainer gets: the batches an epoch trains (the schedule's length, the
        probe's) and so the epochs."""
        self.steps_per_epoch = _batches(len(train), trainer.limit_train_batches)
        self.epochs = _epochs(trainer, self.steps_per_epoch)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        # (the first starts the context's epochs; ctx.prepare built model and optimizer)
        if not self.port.epoch_begin(self.steps_per_epoch or 1, epochs=self.epochs):  # early stopping ended them
            trainer.should_stop = True

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.port.batch_begin()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self.port.running:
            return
        x = _first_tensor(batch)
        n = len(x) if x is not None and x.ndim else 1
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor):  # (Lightning divided it by the accumulation: the batch's own mean)
            accum = trainer.accumulate_grad_batches
            self.port.step(n, loss.detach() * accum if accum > 1 else loss)
        else:  # (manual optimization returning nothing: samples counted, no loss)
            self.port.step(n)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        # (a validation inside the epoch, val_check_interval < 1, is not the epoch's: its training goes on)
        if not trainer.sanity_checking and trainer.is_last_batch:
            self.validated = True

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """The epoch's evaluation is reported once the epoch's own training metrics are in (at its validation's end,
        Lightning still holds the previous epoch's `on_epoch` training values): its values by the names logged,
        those that are one step's value (`on_step` only, or the `_step` copy) left out and named."""
        if not self.validated:
            return
        self.validated = False
        step = _step_values(trainer)
        current = {k: v for k, v in trainer.callback_metrics.items() if _scalar(v)}
        metrics = {k: v for k, v in current.items() if k != "train_loss" and k not in step}
        once = sorted(set(step) & (set(current) | set(trainer.logged_metrics)))
        logged = ", ".join([*sorted(k for k in current if k not in step),
                            *(f"{k} (one step's value: {step[k]})" for k in once)])
        if self.port.report(metrics, logged=logged or None):
            trainer.should_stop = True

    def finish(self) -> None:
        """trainer.fit returned: the last epoch closes (an unreported one keeps its clocks); no epoch opens."""
        if not self.port.finish():
            raise ContextMisuse("trainer.fit trained no epoch (max_epochs, max_steps or the data left none)")


def _step_values(trainer: Any) -> dict[str, str]:
    """The names whose value is one step's, not the epoch's, with what to log or name instead: `self.log(...,
    on_step=True)` without on_epoch (its last batch's value; a training_step's default), and the `_step` copy of one
    logged both ways. Read from Lightning's result collections (framework_compat.logged_metrics: no public name says
    how a value was logged; none found: nothing is left out)."""
    out: dict[str, str] = {}
    for meta in compat.logged_metrics(trainer):
        if not meta.on_step:
            continue
        if meta.on_epoch:
            out[f"{meta.name}_step"] = f"the epoch's is {meta.name}"
        else:
            out[meta.name] = "log it with on_epoch=True"
    return out


def _scalar(v: Any) -> bool:
    return isinstance(v, (int, float)) or (isinstance(v, torch.Tensor) and v.numel() == 1)


__all__ = ["DEVICE_ARGS", "LIGHTNING", "TrialContext", "cli", "fit"]

