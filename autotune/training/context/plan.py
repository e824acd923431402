"""`TrainingPlan`: the training half of a trial's plan, decided once before it trains and handed to the trial context
as it is (a study's trial makes it in fit/plan.py; a bare `TrialContext(settings)` makes its own, `TrainingPlan.bare`).

It is frozen and typed: the settings, the user's parameters, the seed, the device and the torch threads (each
resolved here, once), the keys the trial searched and fixed, the stop rules' limits, what `ctx.report` may take and
the study's config. It is pickled to the ranks of a several-device trial, so it holds plain values (no proxies).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from autotune.core import contention
from autotune.spec import REPORTED, RunConfig, Settings, is_quality
from autotune.training import accel
from autotune.training.context.limits import Limits

VAL_LOSS = (("val_loss", "minimize"),)  # what early stopping watches without a study's quality objectives


@dataclass(frozen=True)
class Threads:
    """The torch threads a CPU trial trains on (contention.trial_threads), decided before it trains."""

    used: int  # its cpu_threads; else the process's threads (or `cap`), less one per DataLoader worker
    cap: int | None  # the cap after an oversubscribed trial, where it applies (cpu_threads left at 0); else None
    chosen: bool  # autotune chose `used` (cpu_threads left at 0, and `used` is not torch's default here)

    @classmethod
    def decide(cls, settings: Settings, device: torch.device, cap: int | None = None) -> Threads | None:
        """A CPU run's threads (None on an accelerator): a user's cpu_threads is theirs, else `cap` or torch's."""
        if device.type != "cpu":
            return None
        cap = None if settings.cpu_threads else cap
        default = torch.get_num_threads()
        used = contention.trial_threads(settings, cap, torch_default=default)
        return cls(used=used, cap=cap, chosen=not settings.cpu_threads and used != default)


@dataclass(frozen=True)
class TrainingPlan:
    """What one trial context trains: everything decided before `fit(ctx)` runs, read by the context as it is.

    `user`: the user's parameters by their bare names (ctx.params); `searched` / `fixed`: the keys the trial
    searched / set explicitly (with searched, the user's choices); `metrics`: what ctx.report may take (None:
    anything); `early_stopping_on`: the metrics early stopping watches, each with its direction; `config`: the
    study's config (None: a bare context); `measure_inference`: the built-in trainer measures size and latency."""

    settings: Settings
    device: torch.device  # resolved (`auto` is the device this process trains on)
    threads: Threads | None  # a CPU run's torch threads; None on an accelerator
    user: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    searched: frozenset[str] = frozenset()
    fixed: frozenset[str] = frozenset()
    limits: Limits = field(default_factory=Limits)
    metrics: frozenset[str] | None = None
    early_stopping_on: tuple[tuple[str, str], ...] = VAL_LOSS
    config: RunConfig | None = None
    measure_inference: bool = True

    @classmethod
    def bare(cls, settings: Settings | Mapping[str, Any], *, user: Mapping[str, Any] | None = None, seed: int = 0,
             **fields: Any) -> TrainingPlan:
        """The plan of a context made outside a study (a notebook, a fine-tune): its device and threads resolved
        from the settings; `fields`: any other field (limits, searched, fixed...)."""
        typed = Settings(settings)
        device = accel.resolve_device(typed.device)
        for name, kind in (("searched", frozenset), ("fixed", frozenset), ("metrics", frozenset),
                           ("early_stopping_on", tuple)):
            if fields.get(name) is not None:
                fields[name] = kind(fields[name])
        return cls(settings=typed, device=device, threads=Threads.decide(typed, device), user=dict(user or {}),
                   seed=seed, **fields)

    @classmethod
    def of(cls, cfg: RunConfig, settings: Settings, user: Mapping[str, Any], seed: int, *, cap: int | None,
           searched: frozenset[str], fixed: frozenset[str], limits: Limits, measure_inference: bool) -> TrainingPlan:
        """A study's (or a config's) run: ctx.report takes autotune's reported metrics, the objectives' and the
        config's `metrics:`; early stopping watches val_loss and every quality objective."""
        device = accel.resolve_device(settings.device)
        return cls(settings=settings, device=device, threads=Threads.decide(settings, device, cap), user=dict(user),
                   seed=seed, searched=searched, fixed=fixed, limits=limits,
                   metrics=frozenset({*REPORTED, *(o.metric for o in cfg.objectives), *cfg.metrics}),
                   early_stopping_on=VAL_LOSS + tuple((o.metric, str(o.direction)) for o in cfg.objectives
                                                      if is_quality(o.metric)),
                   config=cfg, measure_inference=measure_inference)

    @property
    def chosen(self) -> frozenset[str]:
        """The keys the trial chose: searched, or fixed explicitly."""
        return self.searched | self.fixed

    @property
    def objectives(self) -> tuple[str, ...]:
        """The study's objectives' metrics (none for a bare context)."""
        return tuple(o.metric for o in self.config.objectives) if self.config is not None else ()

    @property
    def config_file(self) -> str | None:
        """The study's config file (what an error about the user's code names), None for a bare context."""
        return self.config.file if self.config is not None else None

    def on(self, device: torch.device) -> TrainingPlan:
        """This plan on one rank's own device (a several-device trial)."""
        return dataclasses.replace(self, settings=self.settings.replace(device=str(device)), device=device)

    def with_settings(self, **changes: Any) -> TrainingPlan:
        """This plan with some settings changed (a fine-tune's epochs, an out-of-memory retry's batch sizes)."""
        return dataclasses.replace(self, settings=self.settings.replace(**changes))


__all__ = ["Threads", "TrainingPlan"]
