"""Which settings a trial used, and why a searched one nothing used took no effect (the trial's `not_applied`).

The trial context notes every setting read: its own uses where it applies one (the optimizer factory reads
optimizer, lr, momentum, weight_decay; `ctx.backward` grad_clip, grad_accum_steps, lr_schedule; `ctx.loader`
batch_size and the DataLoader's settings; `ctx.autocast` precision...) and the training function's reads
through `ctx.settings` and `ctx.params` (its own loss reading `ctx.settings.label_smoothing`). A searched
setting that nothing read cannot have changed the trial: it is recorded as not applied, with the reason
`why` gives here, and left out of the recommendation and of `best --export`.

A read is the only evidence there is for a setting autotune has no hand in (the fit's own loss taking
label_smoothing, `user.` parameters). The settings autotune applies itself (`EFFECT_KEYS`: the optimizer family,
lr, momentum, weight_decay, lr_schedule) count by their effect instead, whatever the fit read (see
TrialState.effects_now); those that did not act are also left out of the trial's stored settings, searched or
not (a default optimizer adam under the fit's own SGD was never used).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import torch

from autotune.spec import SETTINGS, Settings, applied_by

USER_PREFIX = "user."  # a training function's own parameter, `user.NAME` (spec.USER_PREFIX)

# Each group is the settings catalogue's `applied_by` part (spec.APPLIERS).
# Applied around every trial, whatever the training function does (trainer.train, trial_session).
APPLIED_AROUND = applied_by("around")

OPTIMIZER_KEYS = applied_by("optimizer")
STEP_KEYS = applied_by("step", "schedule")  # ctx.backward steps autotune's schedule too
LOADER_KEYS = applied_by("loader")
DATALOADER_KEYS = applied_by("dataloader")
PREPARE_KEYS = applied_by("prepare")

# Settings autotune applies itself: applied by their effect (the optimizer that stepped is the one autotune built,
# or the fit's own with its lrs scaled by a chosen lr; autotune's schedule set the lr), never because a fit read
# them (a fit logging ctx.settings reads them all). `BUILT_WITH`: those a fit may read to build its own optimizer
# with (its numbers: an optimizer's param groups hold them): applied when one of its groups holds the value read
# (not when a read was for logging).
EFFECT_KEYS = applied_by("optimizer", "schedule")
BUILT_WITH = tuple(k for k in OPTIMIZER_KEYS if SETTINGS[k].kind == "float")


def in_groups(opt: Any, key: str, value: Any) -> bool:
    """Some parameter group of `opt` holds `value` for `key` (the fit built its optimizer with what it read), as a
    number or a one-element tensor (`Adam(lr=torch.tensor(lr))`, for capturable and compiled steps)."""
    for g in opt.param_groups:
        v, tol = g.get(key), 1e-9
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            v, tol = float(v), 1e-6  # (a float32 tensor holds the value to float32's precision)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isclose(v, float(value), rel_tol=tol,
                                                                                     abs_tol=1e-12):
            return True
    return False


def wrapped(opt: Any) -> list[torch.optim.Optimizer]:
    """The optimizers `opt` wraps (a Lookahead's base optimizer: timm's `_base_optimizer`, torch-optimizer's
    `optimizer`): its attributes that are optimizers."""
    try:
        values = list(vars(opt).values())
    except TypeError:
        return []
    return [v for v in values if isinstance(v, torch.optim.Optimizer) and v is not opt]


def wraps(opt: Any, optimizers: Any) -> bool:
    """`opt` is one of `optimizers`, or a wrapper around one (it holds it, or shares its parameter groups): a step
    of `opt` is a step of that optimizer, with the settings it was built with."""
    inner = [o for o in optimizers]
    if any(opt is o for o in inner) or any(w is o for w in wrapped(opt) for o in inner):
        return True
    mine = {id(g) for o in inner for g in o.param_groups}
    return bool(opt.param_groups) and all(id(g) in mine for g in opt.param_groups)


# What reads a setting in the built-in trainer, which a training function of its own replaces: by the part that
# applies it (the catalogue's `applied_by`).
_OWN_PART = {
    "loss": "the loss is your own (read ctx.settings.{key} in it to search it)",
    "model": "the model is your own (read ctx.settings.{key} in it to search it)",
    "augment": "the augmentation is your own",
    "eval": "your evaluation batches its own way (ctx.loader(..., train=False) takes it)",
    "epochs": "ctx.epochs() was never iterated",
}
OWN = {key: _OWN_PART[s.applied_by].format(key=key) for key, s in SETTINGS.items() if s.applied_by in _OWN_PART}


class Trial(Protocol):
    """What `why` reads of a trial context's state (state.TrialState)."""

    own_optimizer: bool | None
    framework: str | None
    reads: set[str]
    stepper: Any
    init_asked: bool | None
    train_on_device: bool | None
    raw: Settings


class WatchedParams(Mapping[str, Any]):
    """`ctx.params`: every setting and the user's parameters by name, read-only; a value read is noted in `reads`
    (a user parameter as `user.NAME`, as the space names it)."""

    def __init__(self, settings: Settings, user: Mapping[str, Any], reads: set[str]) -> None:
        self._values: dict[str, Any] = {**settings, **user}
        self._user = frozenset(user)
        self._reads = reads

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        self._reads.add(USER_PREFIX + key if key in self._user else key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"params({self._values!r})"


def _were(keys: list[str]) -> str:
    return f"{', '.join(keys)} {'was' if len(keys) == 1 else 'were'} not used"


def why(state: Trial, key: str, missed: list[str]) -> str:
    """Why nothing read `key` in this trial (`missed`: every searched key nothing read, to name them together)."""
    if key.startswith(USER_PREFIX):
        return f"ctx.params[{key[len(USER_PREFIX):]!r}] was never read"
    if key in OPTIMIZER_KEYS:
        return _why_optimizer(state, key, missed)
    for rule in (_why_step, _why_prepare, _why_loader):  # in this order: a key may be in several groups
        reason = rule(state, key)
        if reason is not None:
            return reason
    if key == "precision":
        return "ctx.autocast() was never used (nor the setting read): the forward pass ignored it"
    if key in OWN:
        return f"{key} was never read: {OWN[key]}"
    return f"{key} was never read (by the context, or through ctx.settings / ctx.params)"


def _why_optimizer(state: Trial, key: str, missed: list[str]) -> str:
    st = state.stepper
    if state.own_optimizer is None and st.opt_steps == 0:  # (a framework's loop steps the one autotune built too)
        return "ctx.prepare(model) was never called: the context built no optimizer"
    if state.own_optimizer and key == "lr" and "lr" in state.reads and st.scaled is None:
        return ("your fit read lr before ctx.prepare, but no group of its own optimizer has that lr: it was not "
                "used (build the optimizer with it, or leave it unread and ctx.prepare scales your groups' lrs by "
                "it)")
    if state.own_optimizer and key == "lr" and st.scaled is not None:
        return "your optimizer never stepped with the lrs the searched lr scaled"
    if state.own_optimizer:
        unused = _were([k for k in OPTIMIZER_KEYS if k in missed and k != "lr"])
        if state.framework is not None:  # (Lightning: the module's configure_optimizers)
            return f"your own optimizer trained under {state.framework}: {unused} (choose optimizer too, to train " \
                   "with autotune's)"
        return f"your fit built its own optimizer: {unused}"
    if st.opt_steps == 0:
        return "the optimizer the context built never stepped"
    return f"optimizer {state.raw['optimizer']} takes no {key}"


def _why_step(state: Trial, key: str) -> str | None:
    if key not in STEP_KEYS:
        return None
    if key == "lr_schedule" and state.stepper.own_scheduler:
        return "your fit's own learning-rate scheduler steps the lr: the searched lr_schedule was not used"
    if key == "lr_schedule" and state.stepper.overwritten:
        return "your fit sets the optimizer's group lrs itself, overwriting what the context set"
    if not state.stepper.stepped:
        return "ctx.backward(loss) was never called: your loop steps the optimizer itself"
    return None


def _why_prepare(state: Trial, key: str) -> str | None:
    if key not in PREPARE_KEYS:
        return None
    if state.init_asked is None:
        return "ctx.prepare(model) was never called"
    if key == "init" and not state.init_asked:
        return "ctx.prepare(..., init=False) kept the model's weights"
    if key == "compile_mode":
        return "compile is off"
    return None


def _why_loader(state: Trial, key: str) -> str | None:
    if key not in LOADER_KEYS + DATALOADER_KEYS:
        return None
    if state.train_on_device is None:
        return "your fit never called ctx.loader(...) for its training data (nor read the setting)"
    if key in DATALOADER_KEYS:
        return ("the training batches were on the device (data_on_device): no DataLoader" if state.train_on_device
                else "with num_workers 0 the DataLoader has no worker processes")
    return None


__all__ = ["APPLIED_AROUND", "BUILT_WITH", "EFFECT_KEYS", "WatchedParams", "in_groups", "why", "wrapped", "wraps"]
