"""Why a setting the trial chose took no effect: the reason the trial's `not_applied` gives for each key nothing
applied (`why`), read off the trial's ledger (applied.Applied) and its optimizer steps (stepper.Stepper)."""

from __future__ import annotations

from typing import Any, Protocol

from autotune.spec import SETTINGS, USER_PREFIX, Settings, applied_by


class Steps(Protocol):
    """What the reasons (and the ledger's record) read of the trial's optimizer steps (stepper.Stepper)."""

    opt_steps: int
    scaled: Any  # (lr, the groups' own lrs, scaled) when a chosen lr scaled a fit-built optimizer's lrs
    decided: bool
    own_scheduler: bool
    overwritten: bool
    stepped: bool


class Facts(Protocol):
    """What the reasons read of the trial's ledger (applied.Applied)."""

    own_optimizer: bool | None
    framework: str | None
    init_asked: bool | None
    train_on_device: bool | None

    def was_read(self, key: str) -> bool: ...

# The settings catalogue's `applied_by` parts (spec.APPLIERS) whose reasons differ.
OPTIMIZER_KEYS = applied_by("optimizer")
STEP_KEYS = applied_by("step", "schedule")  # ctx.backward steps autotune's schedule too
LOADER_KEYS = applied_by("loader")
DATALOADER_KEYS = applied_by("dataloader")
PREPARE_KEYS = applied_by("prepare")

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


def _were(keys: list[str]) -> str:
    return f"{', '.join(keys)} {'was' if len(keys) == 1 else 'were'} not used"


def why(state: Facts, stepper: Steps, settings: Settings, key: str, missed: list[str]) -> str:
    """Why nothing applied `key` in this trial (`missed`: every chosen key nothing applied, to name them together;
    `settings`: the trial's, read without noting)."""
    if key.startswith(USER_PREFIX):
        return f"ctx.params[{key[len(USER_PREFIX):]!r}] was never read"
    if key in OPTIMIZER_KEYS:
        return _why_optimizer(state, stepper, settings, key, missed)
    for rule in (_why_step, _why_prepare, _why_loader):  # in this order: a key may be in several groups
        reason = rule(state, stepper, key)
        if reason is not None:
            return reason
    if key == "precision":
        return "ctx.autocast() was never used (nor the setting read): the forward pass ignored it"
    if key in OWN:
        return f"{key} was never read: {OWN[key]}"
    return f"{key} was never read (by the context, or through ctx.settings / ctx.params)"


def _why_optimizer(state: Facts, st: Steps, settings: Settings, key: str, missed: list[str]) -> str:
    if state.own_optimizer is None and st.opt_steps == 0:  # (a framework's loop steps the one autotune built too)
        return "ctx.prepare(model) was never called: the context built no optimizer"
    if state.own_optimizer and key == "lr" and state.was_read("lr") and st.scaled is None:
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
    return f"optimizer {settings['optimizer']} takes no {key}"


def _why_step(state: Facts, stepper: Steps, key: str) -> str | None:
    if key not in STEP_KEYS:
        return None
    if key == "lr_schedule" and stepper.own_scheduler:
        return "your fit's own learning-rate scheduler steps the lr: the searched lr_schedule was not used"
    if key == "lr_schedule" and stepper.overwritten:
        return "your fit sets the optimizer's group lrs itself, overwriting what the context set"
    if not stepper.stepped:
        return "ctx.backward(loss) was never called: your loop steps the optimizer itself"
    return None


def _why_prepare(state: Facts, stepper: Steps, key: str) -> str | None:
    if key not in PREPARE_KEYS:
        return None
    if state.init_asked is None:
        return "ctx.prepare(model) was never called"
    if key == "init" and not state.init_asked:
        return "ctx.prepare(..., init=False) kept the model's weights"
    if key == "compile_mode":
        return "compile is off"
    return None


def _why_loader(state: Facts, stepper: Steps, key: str) -> str | None:
    if key not in LOADER_KEYS + DATALOADER_KEYS:
        return None
    if state.train_on_device is None:
        return "your fit never called ctx.loader(...) for its training data (nor read the setting)"
    if key in DATALOADER_KEYS:
        return ("the training batches were on the device (data_on_device): no DataLoader" if state.train_on_device
                else "with num_workers 0 the DataLoader has no worker processes")
    return None


__all__ = ["OPTIMIZER_KEYS", "OWN", "Facts", "Steps", "why"]
