"""What ctx.backward does to the gradients and the optimizer: loss scaling (a GradScaler for fp16), gradient
accumulation over `grad_accum_steps` micro-batches (DDP's all-reduce only where one ends), clipping, the
optimizer step and the trial's `lr_schedule` (or none under a torch scheduler of the fit's own).

A searched lr on an optimizer the fit built scales its groups' lrs; a fit that then sets the group lrs itself
(nanoGPT) overwrites them, which is noted once (the searched lr and lr_schedule did not apply). A scheduler of
the fit's own moves them from where the context put them (the lr applied, lr_schedule did not): one that marks
the groups (`initial_lr`: every torch LRScheduler but ReduceLROnPlateau), or one the fit holds
(`fit_scheduler`: ReduceLROnPlateau marks nothing; found among the fit's variables, no heap scan).

The step hooks (the steps counted, the lr each took) are removed when the trial ends (`remove_hooks`): an
optimizer that outlives its trial keeps no callback of it. An optimizer whose step needs a closure (LBFGS) is
one ctx.backward cannot step: the fit steps it (a clear ContextMisuse says so).
"""

from __future__ import annotations

import inspect
import math
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from autotune.core import library_file
from autotune.spec import Settings
from autotune.training.context.applied import Applied, wrapped
from autotune.training.context.misuse import ContextMisuse
from autotune.training.optimizers import SCHEDULES


def group_lrs(opt: torch.optim.Optimizer) -> list[float]:
    return [float(g["lr"]) for g in opt.param_groups]


def has_scheduler(opt: torch.optim.Optimizer) -> bool:
    """A torch scheduler is on the optimizer (torch's schedulers note each group's `initial_lr`)."""
    return any("initial_lr" in g for g in opt.param_groups)


SCHEDULERS = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def fit_scheduler(opt: torch.optim.Optimizer) -> bool:
    """A torch scheduler of the fit's own steps this optimizer's lrs (or the lrs of one it wraps): one that marks its
    groups, or one held by the fit (a variable of a frame of the user's code on the stack, or an attribute of one:
    `self.scheduler`). Read where the fit calls the context (ctx.backward), so the fit's frames are there."""
    if has_scheduler(opt):
        return True
    targets = {id(opt), *(id(w) for w in wrapped(opt))}
    frame: types.FrameType | None = sys._getframe(1)
    for _ in range(40):
        if frame is None:
            break
        if not library_file(frame.f_code.co_filename):
            for value in list(frame.f_locals.values()):
                if any(isinstance(c, SCHEDULERS) and id(getattr(c, "optimizer", None)) in targets
                       for c in (value, *_attributes(value))):
                    return True
        frame = frame.f_back
    return False


def _attributes(obj: Any) -> list[Any]:
    """An object's attribute values (a trainer's `self.scheduler`), a few dozen at most; none for a module or type."""
    if isinstance(obj, (type, types.ModuleType)):
        return []
    try:
        return list(vars(obj).values())[:64]
    except TypeError:
        return []


def post_hook(opt: torch.optim.Optimizer, fn: Callable[[torch.optim.Optimizer], Any]) -> list[Any]:
    """`fn(optimizer)` after every step of `opt`; the handles, for `remove_hooks`. A wrapper built without
    Optimizer.__init__ (timm's Lookahead) has no hooks of its own: then on the optimizers it wraps, whose step
    its step makes."""
    try:
        return [opt.register_step_post_hook(lambda o, *_: fn(o))]
    except (AttributeError, TypeError):
        return [h for inner in wrapped(opt) for h in post_hook(inner, fn)]


def remove_hooks(handles: list[Any]) -> None:
    for h in handles:
        h.remove()
    handles.clear()


def needs_closure(opt: torch.optim.Optimizer) -> bool:
    """The optimizer's step takes a closure it must have (LBFGS re-evaluates the loss inside its step)."""
    try:
        p = inspect.signature(opt.step).parameters.get("closure")
    except (TypeError, ValueError):
        return False
    return p is not None and p.default is inspect.Parameter.empty


def scale_lrs(opt: torch.optim.Optimizer, factor: float) -> None:
    """A searched lr on an optimizer the fit built: each group's own lr times it (the groups' ratios hold)."""
    if has_scheduler(opt):
        raise ContextMisuse("lr is searched: ctx.prepare scales your optimizer's group lrs by it, but a "
                            "learning-rate scheduler was already built on the optimizer and would restore the "
                            "unscaled ones; build your scheduler after ctx.prepare(model, optimizer)")
    for g in opt.param_groups:
        if isinstance(g["lr"], torch.Tensor):
            g["lr"].mul_(factor)
        else:
            g["lr"] = g["lr"] * factor


class Stepper:
    """One trial's optimizer steps. `settings`: the trial's (watched) settings; `applied`: the trial's ledger
    (grad_accum_steps counts as applied once the context steps; what the fit overwrote did not apply)."""

    def __init__(self, settings: Settings, applied: Applied, scaler: Any, accum: int) -> None:
        self.settings = settings
        self.applied = applied
        self.searched = applied.searched
        self.scaler = scaler  # a GradScaler (fp16 on a GPU) or None
        self.accum = accum  # grad_accum_steps
        self.opt: torch.optim.Optimizer | None = None
        self.sched: torch.optim.lr_scheduler.LRScheduler | None = None
        self.ddp: nn.parallel.DistributedDataParallel | None = None  # the wrapper (several devices)
        self.micro = 0  # micro-batches since the last optimizer step
        self.decided = False  # the first optimizer step decides: lr_schedule, or the fit's own scheduler
        self.own_scheduler = False  # a torch scheduler of the fit's own is on the optimizer: it alone steps the lr
        self.stepped = False  # the context stepped the optimizer (ctx.backward)
        self.lr_set: list[float] | None = None  # the group lrs the context last set (scaled, or its schedule's)
        # watched for a fit that overwrites them only while a searched lr / lr_schedule could be found not applied
        self.lr_watch = bool({"lr", "lr_schedule"} & set(self.searched))
        self.overwritten = False  # the fit set the group lrs itself (seen while watched): lr, lr_schedule took none
        self.steps_per_epoch: int | None = None  # the batches (ctx.backward calls) of an epoch, when known
        self.opt_steps = 0  # steps the optimizer took, whoever called opt.step() (its post-hook counts them)
        self.scaled: tuple[float, list[float], list[float]] | None = None  # (lr, the groups' own lrs, scaled)
        self.lr_sum: Any = 0.0  # group 0's lr at each optimizer step of the epoch (a tensor lr stays on its device)
        self.lr_n = 0
        self.lr_first: Any = None  # the epoch's first step's lr while it has not moved
        self.handles: list[Any] = []  # the step hooks on the optimizers (removed when the trial ends)
        self.closure = False  # its step needs a closure (LBFGS): ctx.backward cannot step it

    def use(self, opt: torch.optim.Optimizer, scale: float | None, own: bool = False) -> None:
        """The optimizer to step; `scale`: a chosen lr multiplying a fit-built optimizer's group lrs (`own`: the
        fit built it; its lrs are watched for the fit setting them itself)."""
        if scale is not None:
            before = group_lrs(opt)
            scale_lrs(opt, scale)
            self.scaled = (scale, before, group_lrs(opt))
        self.lr_watch = self.lr_watch or own
        if self.lr_watch:
            self.lr_set = group_lrs(opt)
        self.opt = opt
        self.closure = needs_closure(opt)
        seen = weakref.WeakMethod(self._stepped)  # (the optimizer may outlive the trial: it keeps no context alive)
        self.handles += post_hook(opt, lambda o: (m := seen()) is not None and m(o))

    def _stepped(self, opt: torch.optim.Optimizer) -> None:
        """After each step of the optimizer (ctx.backward's or the fit's own opt.step()): counted, and the lr it
        took noted (no host sync: a tensor lr is summed where it is)."""
        self.opt_steps += 1
        lr = opt.param_groups[0]["lr"]
        self.lr_sum = self.lr_sum + (lr.detach() if isinstance(lr, torch.Tensor) else lr)
        if self.lr_n == 0:
            self.lr_first = lr
        elif isinstance(lr, torch.Tensor) or lr != self.lr_first:
            self.lr_first = None  # it moved: the mean (a constant lr is given exactly, not as a rounded mean)
        self.lr_n += 1

    def epoch_lr(self) -> float:
        """The lr the epoch trained at: group 0's mean over the epoch's optimizer steps, read as each stepped (a
        scheduler stepped at the epoch's end moves the next epoch's); without a step, the lr now. Starts the
        next epoch's count."""
        if self.lr_n and isinstance(self.lr_first, float):
            lr = self.lr_first
        elif self.lr_n:
            lr = float(self.lr_sum) / self.lr_n
        else:
            lr = float(self.opt.param_groups[0]["lr"]) if self.opt is not None else math.nan
        self.lr_sum, self.lr_n = 0.0, 0
        return lr

    def sync_when_due(self, last_batch: bool) -> None:
        """DDP with accumulation: the next backward all-reduces only where the accumulation ends (no_sync)."""
        ddp: Any = self.ddp  # (DistributedDataParallel's own flag: not on nn.Module's type)
        assert ddp is not None
        ddp.require_backward_grad_sync = self.micro + 1 >= self.accum or last_batch

    def backward(self, loss: torch.Tensor, last_batch: bool) -> None:
        """One micro-batch's backward of its mean `loss`; the optimizer step every `accum` micro-batches and at
        the end of the training data (`last_batch`)."""
        accum = self.accum
        scaled = loss / accum if accum > 1 else loss
        (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
        self.micro += 1
        if self.micro >= accum or last_batch:
            self.step()

    def flush(self) -> bool:
        """Gradients of a trailing partial accumulation are stepped at the end of the epoch's data (True if so)."""
        if self.micro and self.opt is not None:
            self.step()
            return True
        return False

    def step(self) -> None:
        assert self.opt is not None
        s = self.settings
        if self.closure:
            raise ContextMisuse(f"ctx.backward cannot step {type(self.opt).__name__}: its step(closure) re-evaluates "
                                "the loss itself; step it in your loop instead, opt.step(closure) with a closure that "
                                "calls opt.zero_grad(), computes the loss and calls loss.backward() (and no "
                                "ctx.backward)")
        if self.lr_set is not None and not self.own_scheduler and (self.sched is not None or
                                                                   not has_scheduler(self.opt)):
            self.lr_overwritten()  # (a torch scheduler of the fit's own moves the lrs as it should: not checked)
        if not self.decided:
            self.decided = self.stepped = True
            self.applied.read("grad_accum_steps")  # (applied by ctx.backward from here on)
            self.sched = self.make_schedule()
        if s["grad_clip"] > 0:
            if self.scaler is not None:
                self.scaler.unscale_(self.opt)
            params = [p for g in self.opt.param_groups for p in g["params"]]
            nn.utils.clip_grad_norm_(params, s["grad_clip"])
        if self.scaler is not None:
            self.scaler.step(self.opt)  # skips the step (and lowers the scale) on inf/nan gradients
            self.scaler.update()
        else:
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.sched is not None:
            self.sched.step()
            if self.lr_watch:
                self.lr_set = group_lrs(self.opt)
        self.micro = 0

    def lr_overwritten(self) -> None:
        """The fit set the groups' lrs itself since the context did (nanoGPT's `group['lr'] = get_lr(it)`): the
        searched lr (and lr_schedule) it overwrote took no effect, whatever was read. Checked until it is seen."""
        assert self.opt is not None and self.lr_set is not None
        if group_lrs(self.opt) == self.lr_set:
            return
        if fit_scheduler(self.opt):  # its own scheduler moved them (ReduceLROnPlateau): from the context's, alone
            self.own_scheduler = True
            self.sched = None
            self.lr_set, self.lr_watch = None, False
            return
        why = "your fit sets the optimizer's group lrs itself, overwriting what the context set"
        for key in ("lr", "lr_schedule"):
            if key in self.searched:
                self.applied.cannot(key, why, first=True)
        self.overwritten = True
        self.lr_set, self.lr_watch = None, False  # seen once: no more work per step

    def make_schedule(self) -> torch.optim.lr_scheduler.LRScheduler | None:
        """The trial's lr_schedule over each group's own lr (None: constant). A torch scheduler of the fit's own
        on the optimizer steps the lr alone: not both."""
        assert self.opt is not None
        if fit_scheduler(self.opt):
            self.own_scheduler = True
            return None
        s = self.settings
        if SCHEDULES[s["lr_schedule"]] is None:
            return None
        if self.steps_per_epoch is None:
            raise ContextMisuse(f"lr_schedule {s['lr_schedule']} needs the steps per epoch: iterate a "
                                "ctx.loader(...) for the training data, or give ctx.epochs(steps_per_epoch=...)")
        per_epoch = math.ceil(self.steps_per_epoch / int(s["grad_accum_steps"]))
        builder = SCHEDULES[s["lr_schedule"]]
        assert builder is not None
        return builder(self.opt, per_epoch * int(s["epochs"]))


__all__ = ["SCHEDULERS", "Stepper", "fit_scheduler", "group_lrs", "needs_closure", "post_hook", "remove_hooks",
           "scale_lrs"]
