"""A training function's misuse of the trial context: each check raises `ContextMisuse` with one clear message.

Pure checks on what the context was given (and its state, passed in): nothing here trains or reads a clock.
"""

from __future__ import annotations

import difflib
import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from autotune.core import AutotuneError, ConfigError, TrialStopped, library_file, one_of, suggest, user_frame, watchdog
from autotune.spec import CLOCKS, RunConfig, is_quality


class ContextMisuse(AutotuneError):
    """A training function used the trial context in a way that cannot work (a clear message, never a guess),
    naming the user's file:line: the innermost frame outside autotune when it is raised (the call that misused
    the context), or `at` (a misuse found after the fit returned: the fit itself)."""

    def __init__(self, message: str, at: str | None = None) -> None:
        super().__init__(message)
        # where the user's code misused the context; describe_exception and the ranks read it as the error's place
        self._autotune_where = user_frame() if at is None else at

    def __str__(self) -> str:
        where = self.__dict__.get("_autotune_where")
        return f"{super().__str__()} (at {where})" if where else super().__str__()


def check_live(stop: TrialStopped | None, what: str) -> None:
    """Nothing is called on a context whose trial was stopped (the fit caught the stop), or interrupted (the
    watchdog's interrupt, raised again at every call: watchdog.check)."""
    watchdog.check()
    if stop is not None:
        raise ContextMisuse(f"{what} after the trial was stopped ({stop}): let the stop exception "
                            "propagate out of your training function instead of catching it")


def refuse_backward(stop: TrialStopped | None, in_epoch: bool, epoch_open: bool, epoch: int, prepared: bool) -> None:
    """Why this ctx.backward cannot step (called only when one of these is wrong: the hot path checks them)."""
    check_live(stop, "ctx.backward")
    if not in_epoch:
        raise ContextMisuse("ctx.backward outside `for epoch in ctx.epochs()`: the clocks and stop rules "
                            "count epochs")
    if not epoch_open:
        raise ContextMisuse(f"ctx.backward after ctx.report in epoch {epoch}: report once, after the "
                            "epoch's training steps")
    if not prepared:
        raise ContextMisuse("ctx.backward before ctx.prepare(model): the context steps the optimizer it made")


def check_report(in_epoch: bool, reported: bool, epoch: int) -> None:
    if not in_epoch:
        raise ContextMisuse("ctx.report outside `for epoch in ctx.epochs()`: report each epoch's metrics inside "
                            "the loop, once (final metrics after the loop: return them from fit as a dict)")
    if reported:
        raise ContextMisuse(f"ctx.report called twice in epoch {epoch}: report every metric in one call")


def check_epochs(iterated: bool, steps_per_epoch: Any) -> None:
    if iterated:
        raise ContextMisuse("ctx.epochs() was already iterated in this trial: iterate it once")
    if steps_per_epoch is not None and (isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int)
                                        or steps_per_epoch < 1):
        raise ContextMisuse(f"ctx.epochs(steps_per_epoch=...): the ctx.backward calls of one epoch, an int "
                            f">= 1; got {steps_per_epoch!r}")


def check_model(model: Any, prepared: bool) -> None:
    if prepared:
        raise ContextMisuse("ctx.prepare was already called in this trial: one model per trial")
    if not isinstance(model, nn.Module):
        raise ContextMisuse(f"ctx.prepare takes a torch.nn.Module; got {type(model).__name__}")


def optimizer_of(optimizer: Any, model: nn.Module) -> torch.optim.Optimizer:
    """ctx.prepare's optimizer: an optimizer as given, or built by a callable of the trainable parameters."""
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if not callable(optimizer):
        raise ContextMisuse("ctx.prepare(model, optimizer): optimizer must be None, a torch.optim.Optimizer or a "
                            f"callable of parameters; got {type(optimizer).__name__}")
    opt = optimizer([p for p in model.parameters() if p.requires_grad])
    if not isinstance(opt, torch.optim.Optimizer):
        raise ContextMisuse(f"the optimizer factory given to ctx.prepare returned {type(opt).__name__}, "
                            "not a torch.optim.Optimizer")
    return opt


def step_samples(loss: Any, n_samples: Any, fed: bool, batch_n: int) -> int:
    """The samples of one ctx.backward: given, the first dimension of an unreduced loss, or the ctx.loader
    batch's (`fed`: one was taken, of `batch_n` samples); a loop of its own that gives none of these is refused
    (its samples/s would be steps/s)."""
    if not isinstance(loss, torch.Tensor):
        raise ContextMisuse(f"ctx.backward takes the loss tensor; got {type(loss).__name__}")
    if n_samples is not None:
        if isinstance(n_samples, bool) or not isinstance(n_samples, numbers.Integral) or n_samples < 1:
            raise ContextMisuse(f"ctx.backward(loss, n_samples=...): the samples in this micro-batch, an int "
                                f">= 1; got {n_samples!r}")
        return int(n_samples)
    if loss.ndim:
        return int(loss.shape[0])
    if fed:
        return batch_n
    raise ContextMisuse("ctx.backward(loss): this step's batch did not come from a training ctx.loader, so its "
                        "samples are unknown: pass ctx.backward(loss, n_samples=len(x)) (or an unreduced loss, "
                        "one value per sample)")


def reportable(config: RunConfig | None, known: Iterable[str] | None) -> set[str]:
    """What a training function is offered to report: the study's objectives that it evaluates (not clocks, not
    what autotune measures on a model), its declared `metrics:`, train_loss and val_loss (early stopping's
    default); without a study, every name accepted but the clocks."""
    if config is None:
        names = set(known or ())
    else:
        names = {o.metric for o in config.objectives} | set(config.metrics)
    # a user's own metric, or one of ours that a training function reports (not a clock, not measured on a model)
    evaluated = {n for n in names if is_quality(n)}
    return evaluated | {"train_loss", "val_loss"}


def check_names(metrics: Mapping[str, Any], known: set[str] | None, config: RunConfig | None, where: str) -> None:
    """In a study, a reported name that is not an objective or a declared metric is the code's, the same in every
    trial: a ConfigError that stops the run at this report (as the integrations stop at their first evaluation),
    with a did-you-mean; its key path is the objective it is close to, else `metrics` (declare it there)."""
    objectives = [o.metric for o in config.objectives] if config is not None else []
    if config is None or known is None or not objectives:
        return
    for key in metrics:
        if key in known or key == "train_loss" or key in CLOCKS:
            continue
        offered = reportable(config, known)
        close = suggest(key, offered)
        near = difflib.get_close_matches(key, objectives, n=1, cutoff=0.6)
        path = f"objectives.{objectives.index(near[0])}.metric" if near else "metrics"
        hint = "" if near else " (a metric of your own: declare it under `metrics:` in the YAML)"
        raise ConfigError(config.file, path,
                          f"{where.format(key=key)} at {user_frame()}: {key!r} is not an objective or a declared "
                          f"metric{close}; {one_of(offered)}{hint}")


def check_metrics(metrics: Mapping[str, Any], known: set[str] | None, offered: Callable[[], set[str]],
                  where: str = "ctx.report({key}=...)") -> dict[str, float]:
    """Reported (or returned: `where` names the place in the message) metrics as floats; `known` the names
    accepted (None: any but the clocks), `offered` the names a refusal lists."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        at = where.format(key=key)
        if key in CLOCKS:  # measured by the context: a fit reports what it evaluates, never these
            raise ContextMisuse(f"{at}: {key} is measured by autotune; report what you evaluate")
        if known is not None and key not in known and key != "train_loss":
            raise ContextMisuse(f"{at}: {key!r} is not an objective or a declared metric; "
                                f"{one_of(offered())} (declare more under `metrics:` in the YAML)")
        out[key] = _number(value, at)
    return out


def _number(value: Any, at: str) -> float:
    """A reported value as a float: an int or float, a numpy scalar, or a tensor (or array) of one number. A
    bool (True stored as 1.0 would rank on the front), a string, None or anything else is refused."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        if value.size != 1 if isinstance(value, np.ndarray) else value.numel() != 1:
            kind = "an array" if isinstance(value, np.ndarray) else "a tensor"
            raise ContextMisuse(f"{at}: a metric is one number; got {kind} of shape {tuple(value.shape)}")
        value = value.item()  # (then checked as the Python number it holds: a bool tensor is a bool)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        plain = bool(value) if isinstance(value, np.bool_) else value
        what = type(value).__name__ + (f" {repr(plain)[:40]}" if isinstance(plain, (bool, str)) else "")
        raise ContextMisuse(f"{at}: a metric is a number (an int, a float, a numpy scalar or a one-element "
                            f"tensor); got {what}")
    return float(value)


def global_name(obj: Any) -> str | None:
    """`file.py: NAME` where a module of the user's (not a library's) holds `obj` as a global (a module-level
    model, say), else None: the object an error is about, named as the user wrote it."""
    import sys

    for mod in list(sys.modules.values()):
        file = getattr(mod, "__file__", None) or ""
        if not file.endswith(".py") or library_file(file):
            continue
        for name, value in list(vars(mod).items()):
            if value is obj and not name.startswith("__"):
                return f"{os.path.basename(file)}: {name}"
    return None


def check_returned(returned: Any, epochs_run: int) -> None:
    if not epochs_run:
        raise ContextMisuse("the training function returned without an epoch: iterate `for epoch in "
                            "ctx.epochs()` and ctx.report(...) each epoch")
    if returned is not None and not isinstance(returned, Mapping):
        raise ContextMisuse(f"a training function returns None or a dict of final metrics; got "
                            f"{type(returned).__name__}")


__all__ = ["ContextMisuse", "check_live", "check_metrics", "global_name", "optimizer_of", "reportable",
           "step_samples"]

