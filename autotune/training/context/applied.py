"""`Applied`: one trial's ledger of what it chose, read, applied by effect, could not apply and left to the user's
recipe, and the one place that turns it into the trial's record (`Applied.record`: not_applied, unused, recipe,
effective lrs). Why a chosen setting took no effect is reasons.py's.

The trial context notes every setting read: its own uses where it applies one (the optimizer factory reads
optimizer, lr, momentum, weight_decay; `ctx.backward` grad_clip, grad_accum_steps, lr_schedule; `ctx.loader`
batch_size and the DataLoader's settings; `ctx.autocast` precision...) and the training function's reads
through `ctx.settings` and `ctx.params` (its own loss reading `ctx.settings.label_smoothing`). A searched
setting that nothing read cannot have changed the trial: it is recorded as not applied, with the reason
`why` gives here, and left out of the recommendation and of `best --export`.

A read is the only evidence there is for a setting autotune has no hand in (the fit's own loss taking
label_smoothing, `user.` parameters). The settings autotune applies itself (`EFFECT_KEYS`: the optimizer family,
lr, momentum, weight_decay, lr_schedule) count by their effect instead, whatever the fit read (see
Applied.effects); those that did not act are also left out of the trial's stored settings, searched or
not (a default optimizer adam under the fit's own SGD was never used).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import torch

from autotune.spec import BUILTIN_ONLY, SETTINGS, USER_PREFIX, Settings, applied_by
from autotune.training.context.reasons import OPTIMIZER_KEYS, Steps, why
from autotune.training.context.results import Shaped

# Each group is the settings catalogue's `applied_by` part (spec.APPLIERS).
# Applied around every trial, whatever the training function does (trainer.train, trial_session).
APPLIED_AROUND = applied_by("around")
# Applied by the trial context around every trial, its stop rules and its clocks, whatever trains: autotune's values
# for these are the trial's even where a framework owns the loop (integrations/tables.py reads it too).
BY_CONTEXT = applied_by("around", "stop", "clock")


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


class WatchedParams(Mapping[str, Any]):
    """`ctx.params`: every setting and the user's parameters by name, read-only; a value read is noted in the ledger
    (a user parameter as `user.NAME`, as the space names it)."""

    def __init__(self, settings: Settings, user: Mapping[str, Any], applied: Applied) -> None:
        self._values: dict[str, Any] = {**settings, **user}
        self._user = frozenset(user)
        self._applied = applied

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        self._applied.read(USER_PREFIX + key if key in self._user else key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"params({self._values!r})"




class Applied:
    """One trial's ledger. What the trial chose (searched, or fixed explicitly), what it read (the context's uses,
    the fit's reads through ctx.settings / ctx.params), which optimizer settings acted by their effect, what could
    not apply (with the reason), and what a framework's loop left to the user's recipe (setting -> the value it
    held). Also the facts the reasons read: who built the optimizer, ctx.prepare's init, where the batches were."""

    def __init__(self, searched: Iterable[str] = (), fixed: Iterable[str] = ()) -> None:
        self.searched = tuple(searched)
        self._chosen = frozenset(self.searched) | frozenset(fixed)
        self._reads: set[str] = set(APPLIED_AROUND)
        self._effects: set[str] = set()  # EFFECT_KEYS that acted (an optimizer autotune built stepped with them)
        self._cannot: dict[str, str] = {}
        self._recipe: dict[str, Any] = {}
        self.built_with: frozenset[str] = frozenset()  # lr, momentum, weight_decay the fit built its optimizer with
        self.built: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # the optimizers autotune built
        self.own_optimizer: bool | None = None  # None: no ctx.prepare yet; True: the fit built its optimizer
        self.init_asked: bool | None = None  # ctx.prepare's init (None: not called)
        self.train_on_device: bool | None = None  # the training loader's batches: on the device (None: no loader)
        self.framework: str | None = None  # a framework that owns the loop (its name, in the reasons)

    # ------------------------------------------------------------ what happened

    def chose(self, key: str) -> bool:
        """The trial chose `key`: searched it, or fixed it explicitly (`train:`, `params`)."""
        return key in self._chosen

    def watch(self, settings: Settings) -> Settings:
        """`settings` as the fit reads them: every value read is noted here."""
        return settings.watched(self._reads)

    def read(self, key: str) -> None:
        """`key` was read (by the context where it applies it, or by the fit)."""
        self._reads.add(key)

    def was_read(self, key: str) -> bool:
        return key in self._reads

    def applied(self, *keys: str) -> None:
        """Optimizer settings or lr_schedule that shaped training by their effect (an optimizer stepped with them)."""
        self._effects.update(keys)

    def cannot(self, key: str, why: str, *, first: bool = False, chosen_only: bool = False) -> None:
        """`key` could not apply here, `why` (`first`: an earlier reason stands; `chosen_only`: only a setting the
        trial chose is news, and a read of it is no longer evidence)."""
        if chosen_only:
            if key not in self._chosen:
                return
            self._reads.discard(key)
        if first:
            self._cannot.setdefault(key, why)
        else:
            self._cannot[key] = why

    def received(self, key: str, held: bool, why: str = "") -> None:
        """A setting handed to a framework: read when the framework holds it (`held`); else, if chosen, it could not
        apply, `why` (what the framework holds instead)."""
        if held:
            self.read(key)
        else:
            self.cannot(key, why, chosen_only=True)

    def refused(self, key: str) -> bool:
        """Something said `key` could not apply."""
        return key in self._cannot

    def prepared(self, init: bool, own_optimizer: bool | None = None, built_with: Iterable[str] = ()) -> None:
        """ctx.prepare ran with `init` (and, once it has its optimizer: one the fit built, `own_optimizer`, with
        `built_with`, the optimizer settings it read and built it with; or autotune's)."""
        self.init_asked, self.own_optimizer, self.built_with = init, own_optimizer, frozenset(built_with)

    def loaded(self, on_device: bool) -> None:
        """A training ctx.loader was made: its batches on the device (`on_device`), or from a DataLoader."""
        self.train_on_device = on_device

    def left_to_recipe(self, key: str, value: Any) -> None:
        """A setting the trial did not choose, left to the user's code or the framework's default: `value` is what
        it held (stored apart from the trial's settings)."""
        if key not in self._chosen:
            self._recipe[key] = value

    def unread_choices(self) -> list[str]:
        """The chosen settings (and `user.` parameters) nothing has read or applied so far."""
        return sorted(self._chosen - self._reads)

    @property
    def not_applied(self) -> Mapping[str, str]:
        """What could not apply so far, with the reasons (read-only; the record adds what nothing applied)."""
        return MappingProxyType(self._cannot)

    @property
    def recipe(self) -> Mapping[str, Any]:
        """What the user's recipe held for the settings a framework's loop left to it (read-only)."""
        return MappingProxyType(self._recipe)

    def began(self) -> bool:
        """A framework's recipe was recorded (the trial began training under it)."""
        return bool(self._recipe)

    # ------------------------------------------------------------ the record

    def effects(self, st: Steps) -> set[str]:
        """The optimizer settings and lr_schedule that shaped training (EFFECT_KEYS), by what happened: the
        optimizer autotune built stepped (its settings), or the fit's own stepped with its lrs scaled by a chosen
        lr or built with the values it read; the context's schedule decided the lr (no scheduler of the fit's own,
        no lrs the fit set itself)."""
        out = set(self._effects) & set(EFFECT_KEYS)
        if self.own_optimizer and st.opt_steps:
            out |= self.built_with | ({"lr"} if st.scaled is not None else set())
        if st.decided and not st.own_scheduler:
            out.add("lr_schedule")
        return out - {"lr", "lr_schedule"} if st.overwritten else out

    def unapplied(self, st: Steps, settings: Settings) -> dict[str, str]:
        """Settings the trial chose that took no effect, with the reason: what could not apply, every chosen
        optimizer setting or lr_schedule that did not act (whoever read it), and every other chosen setting (or
        searched `user.` parameter) nothing read (reasons.py says why). Chosen: searched, or fixed explicitly
        (`train:`), but not those the context applies around every trial (BY_CONTEXT: no read proves them) nor the
        built-in trainer's steps after training (BUILTIN_ONLY: validation refuses them off their default
        elsewhere)."""
        out = dict(self._cannot)
        effects = self.effects(st)
        fixed = sorted(k for k in self._chosen - set(self.searched)
                       if k in SETTINGS and k not in BY_CONTEXT and k not in BUILTIN_ONLY)
        missed = [k for k in [*self.searched, *fixed] if k not in out and
                  not (k in effects if k in EFFECT_KEYS else k in self._reads)]
        for key in missed:
            out[key] = why(self, st, settings, key, missed)
        return out

    def unused(self, st: Steps, settings: Settings) -> list[str]:
        """Settings whose values did not shape this trial, searched or not (a default optimizer adam under the
        fit's own SGD): the trial's stored settings leave them out. Under a framework that owns the loop, every
        setting the trial did not choose is the recipe's unless the context applies it around the trial."""
        effects = self.effects(st)
        out = set(self.unapplied(st, settings)) | {k for k in EFFECT_KEYS if k not in effects}
        if self.framework is not None:
            out |= {k for k in SETTINGS if k not in self._chosen and (k in self._recipe or (
                k not in BY_CONTEXT and k not in self._reads))}
        return sorted(out)

    def effective_lrs(self, st: Steps) -> tuple[list[float], list[float]] | None:
        """(the fit's optimizer's own group lrs, what a chosen lr scaled them to), when that took effect."""
        scaled = st.scaled
        return None if scaled is None or "lr" not in self.effects(st) else (scaled[1], scaled[2])

    def record(self, st: Steps, settings: Settings) -> Shaped:
        """What the trial's record says of its settings: not applied, unused, the recipe, the effective lrs."""
        return Shaped(not_applied=self.unapplied(st, settings), unused=self.unused(st, settings),
                      recipe=dict(self._recipe), effective_lrs=self.effective_lrs(st))


__all__ = ["APPLIED_AROUND", "BUILT_WITH", "BY_CONTEXT", "EFFECT_KEYS", "Applied", "WatchedParams", "in_groups",
           "wrapped", "wraps"]
