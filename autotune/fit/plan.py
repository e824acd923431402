"""`TrialPlan`: what one training run is, decided once before it starts, from one point of the space.

A study's trial makes its plan at its top from the values the search sampled (`TrialPlan.for_trial`); a run outside
a study (`autotune.train`, `profile`, `speed`, a teacher's retrain) from fixed values (`TrialPlan.of`). Everything on
a trial's path reads the plan, typed and frozen: admission (the precision on this device, the strategy, the speed
probe), the trainer (its training half, `TrialPlan.training`, handed to the trial context as it is) and the trial's
record. Nothing there but the record takes the sampled dict. No Optuna here.

"Plan" means this one thing in autotune: what one run is, decided before it starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch

from autotune.search import space
from autotune.spec import INFERENCE, USER_PREFIX, RunConfig, Settings
from autotune.training import Limits, Threads, TrainingPlan, accel

HALVED = ("batch_size", "eval_batch_size", "infer_batch_size")  # what an out-of-memory retry halves


@dataclass(frozen=True)
class TrialPlan:
    """One run's inputs: the point the search sampled (stored as the trial's settings), the trial's number, and
    its training half (`training`, a TrainingPlan: settings, user parameters, seed, device, threads, searched and
    fixed keys, limits), which the trainer hands to the trial context as it is."""

    point: Mapping[str, Any]  # as the search sampled it: trainer settings, model.KEY, user.NAME (stored as settings)
    training: TrainingPlan
    number: int = 0  # the trial's number in its study

    @classmethod
    def of(cls, cfg: RunConfig, point: Mapping[str, Any], seed: int, *, number: int = 0,
           searched: frozenset[str] = frozenset(), fixed: frozenset[str] | None = None, study_rules: bool = True,
           measure_inference: bool | None = None, cap: int | None = None) -> TrialPlan:
        """The plan of a point of `cfg`'s space. Inference metrics (size, latency) cost a few timed forward passes,
        so a study measures them only when an objective or constraint uses them (`measure_inference` None).
        `study_rules`: the `pruning:` limits (divergence, slow, hang) apply, as in a study. `fixed` defaults to the
        config's `train:`. `cap`: the torch threads for a CPU run that leaves cpu_threads at 0."""
        if measure_inference is None:
            measure_inference = any(o.metric in INFERENCE for o in cfg.objectives) or \
                cfg.constraints.max_accuracy_drop is not None
        trainer_settings, user = space.split(dict(point))
        p = cfg.pruning
        limits = Limits(loss_factor=p.divergence.loss_factor if p.divergence is not None else None,
                        max_trial_seconds=p.slow.max_trial_seconds, hang_seconds=p.slow.hang_seconds,
                        max_peak_memory_mb=cfg.constraints.max_peak_memory_mb) if study_rules else Limits()
        training = TrainingPlan.of(cfg, Settings(trainer_settings), user, seed, cap=cap, searched=searched,
                                   fixed=frozenset(cfg.train) if fixed is None else fixed, limits=limits,
                                   measure_inference=measure_inference)
        return cls(point=MappingProxyType(dict(point)), training=training, number=number)

    @classmethod
    def for_trial(cls, cfg: RunConfig, point: Mapping[str, Any], number: int, cap: int | None = None) -> TrialPlan:
        """Trial `number`'s plan: its seed (`trial_seed`), the keys it searched, the study's limits."""
        searched = frozenset(k for k, spec in cfg.space.items() if space.active(spec, dict(point)))
        return cls.of(cfg, point, trial_seed(cfg, number), number=number, searched=searched, cap=cap)

    # (the training half's fields, read where the trial's stages decide: admission, the probe, the record)
    @property
    def settings(self) -> Settings:
        return self.training.settings

    @property
    def seed(self) -> int:
        return self.training.seed

    @property
    def device(self) -> torch.device:
        return self.training.device

    @property
    def threads(self) -> Threads | None:
        return self.training.threads

    def value(self, key: str) -> Any:
        """One key's typed value: a trainer setting's or `model.KEY`'s (from `settings`), a user parameter's as
        `user.NAME`; None where the run has no such key."""
        if key.startswith(USER_PREFIX):
            return self.training.user.get(key[len(USER_PREFIX):])
        return self.settings.get(key)

    @property
    def device_name(self) -> str:
        """The device as a trial names it before it trains (a CPU's with its cpu_threads, else this process's)."""
        return accel.device_name(self.device, self.settings.cpu_threads or None)

    @property
    def trained_device_name(self) -> str:
        """The device as it trained: a CPU's with the threads it used."""
        return self.device_name if self.threads is None else accel.device_name(self.device, self.threads.used)

    def halved(self) -> TrialPlan | None:
        """The plan at half the batch sizes (an out-of-memory retry); None where the batch is 1 already."""
        if self.settings.batch_size <= 1:
            return None
        smaller = {k: max(1, int(self.settings[k]) // 2) for k in HALVED}
        return dataclasses.replace(self, point=MappingProxyType({**self.point, **smaller}),
                                   training=self.training.with_settings(**smaller))


def trial_seed(cfg: RunConfig, number: int) -> int:
    """The training seed of trial `number`: `study.trial_seed` + number when set, else study.seed x 100003 + number.
    A study of one trial (`n_trials: 1`, what `best --export` writes) with `trial_seed` trains that seed whatever
    the trial's number: the exported trial's own seed, even when an earlier attempt of the file failed (a failed
    trial is no finished one, so the study goes on with its trial 1, which would train trial_seed + 1)."""
    if cfg.study.trial_seed is not None:
        return cfg.study.trial_seed + (0 if cfg.study.n_trials == 1 else number)
    return (cfg.study.seed or 0) * 100_003 + number


__all__ = ["HALVED", "Threads", "TrialPlan", "trial_seed"]
