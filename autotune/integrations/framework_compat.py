"""Every use the framework adapters make of a framework's private names (`_something`): Hugging Face transformers',
Lightning's, and torch DataLoader's (the loaders a Trainer holds), each behind one small named function here, so
that a release that changes one breaks one place. The counterpart of core/optuna_compat.py.

Tested on the releases in `TESTED` (transformers 5.25, Lightning 2.6: the lowest pyproject.toml's `hf` and
`lightning` extras allow). tests/integrations_tests/test_framework_compat.py checks every name below still exists
and behaves as autotune relies on, naming the framework's internal and the function here when it does not, and
that the installed release is one listed in `TESTED`; it also checks that no other module of autotune names a
private attribute of a framework it imports.

Why each is private and not public API:
- `pop_eval_loaders`, `restore_eval_loaders`: a Trainer caches its evaluation DataLoaders when their workers
  persist (`Trainer._eval_dataloaders`, set on first use): a trial evaluates on loaders of its own batch size and
  ends their workers, and a reused Trainer gets its user's cache back; no public name clears or restores it;
- `set_train_batch_size`, `move_model_to_device`: what `Trainer.__init__` derives from its TrainingArguments
  (`_train_batch_size`, the model's device through `_move_model_to_device`) must be derived again when a reused
  Trainer takes a trial's arguments; the Trainer has no public "take these arguments";
- `end_loader_workers`: torch's DataLoader ends persistent workers only when it is collected
  (`DataLoader._iterator`, `_MultiProcessingDataLoaderIter._shutdown_workers`); a trial's end must end them;
- `logged_metrics`: how a value was logged (`self.log(..., on_step=, on_epoch=)`) is in Lightning's result
  collections only (`_TrainingEpochLoop._results`, `_EvaluationLoop._results`: `_ResultMetric.meta`).
Nothing here imports a framework: each function reads the object it is given, and one whose private name is gone
falls back where a fallback keeps behaviour (`pop_eval_loaders`: nothing cached; `logged_metrics`: nothing known).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

# framework -> the (major, minor) releases the tests here ran on (their module's version test reads it)
TESTED: dict[str, tuple[str, ...]] = {"transformers": ("5.25",), "lightning": ("2.6",)}


# ---------------------------------------------------------------- Hugging Face transformers' Trainer


def pop_eval_loaders(trainer: Any) -> dict[str, Any] | None:
    """Take the Trainer's cached evaluation DataLoaders out of it (`Trainer._eval_dataloaders`: name -> loader,
    present once a loader with persistent workers was built); None where it holds none."""
    return trainer.__dict__.pop("_eval_dataloaders", None)


def restore_eval_loaders(trainer: Any, held: dict[str, Any]) -> None:
    """Give the Trainer back the evaluation DataLoaders `pop_eval_loaders` took."""
    trainer._eval_dataloaders = held


def set_train_batch_size(trainer: Any, batch_size: int) -> None:
    """The batch size the Trainer builds its training DataLoader with (`Trainer._train_batch_size`, which
    `__init__` copies from `args.train_batch_size`)."""
    trainer._train_batch_size = batch_size


def move_model_to_device(trainer: Any, model: Any, device: Any) -> None:
    """Move the model to the device as `Trainer.__init__` does (`Trainer._move_model_to_device`: ties the weights
    again on an XLA device)."""
    trainer._move_model_to_device(model, device)


# ---------------------------------------------------------------- torch's DataLoader (the loaders a Trainer holds)


def end_loader_workers(loaders: Iterable[Any]) -> None:
    """The persistent worker processes of these DataLoaders stop now, not whenever the loaders are collected
    (`DataLoader._iterator`, its `_shutdown_workers`); the next iteration starts new ones."""
    for loader in loaders:
        iterator = getattr(loader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
            loader._iterator = None


# ---------------------------------------------------------------- Lightning's logged values


class Logged(NamedTuple):
    """One name a LightningModule logged, and how (`self.log(name, on_step=, on_epoch=)`)."""

    name: str
    on_step: bool
    on_epoch: bool


def logged_metrics(trainer: Any) -> list[Logged]:
    """The values logged in the fit loop's training epoch and its validation, as Lightning's result collections
    hold them (`trainer.fit_loop.epoch_loop._results`, `.val_loop._results`: `_ResultMetric.meta`); empty where
    they cannot be read."""
    epoch_loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    out = []
    for loop in (epoch_loop, getattr(epoch_loop, "val_loop", None)):
        results = getattr(loop, "_results", None)
        for metric in (results.values() if isinstance(results, Mapping) else ()):
            meta = getattr(metric, "meta", None)
            if meta is not None:
                out.append(Logged(str(meta.name), bool(getattr(meta, "on_step", False)),
                                  bool(getattr(meta, "on_epoch", False))))
    return out


__all__ = ["TESTED", "Logged", "end_loader_workers", "logged_metrics", "move_model_to_device", "pop_eval_loaders",
           "restore_eval_loaders", "set_train_batch_size"]
