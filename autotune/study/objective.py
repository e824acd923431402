"""The only bridge between Optuna and torch: one real training run per trial, in five named stages.

plan    the point the search sampled, made once into a typed, frozen `TrialPlan` (fit/plan.py): settings, user
        parameters, seed, device, threads, searched and fixed keys, limits; and what the trial stores of it
admit   what stops it before it trains: its precision here, the strategy, the speed probe (admit.py)
train   the attempt under the run's watch (hang, timeout, Ctrl-C, host memory), once more at half the batch
        after running out of memory; the study's stop rules after each epoch (attempt.py, epoch_rules.py)
judge   every objective reported and finite, the constraints (judge.py)
record  what it stores (`TrialRecord`), written once, in the transaction that ends it (records.py)

A trial's training either finishes (values returned), stops early (`optuna.TrialPruned`, the reason stored), or
fails: the exception's type, message and place in the user's code are stored, the study goes on, and
`study.max_repeated_errors` failures in a row with the same error stop the run cleanly (outcome.py).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.core import AutotuneError, TrialStopped, describe_exception, hostmem, lifetime, user_where, watchdog
from autotune.fit import REAL, Backend, TrialPlan, fit_name, load_fit, trainer
from autotune.search import lr_scaling_text, pruners
from autotune.spec import RunConfig, is_quality, per_epoch
from autotune.speed import probe, strategy
from autotune.study import growth, records
from autotune.study.admit import admit
from autotune.study.attempt import Attempts
from autotune.study.epoch_rules import StudyRules
from autotune.study.judge import Judge
from autotune.study.outcome import RUN_ENDED, Failures
from autotune.training import TrainResult, accel

log = logging.getLogger(__name__)


class Objective:
    """Callable for `study.optimize`: one real training run per trial."""

    def __init__(self, cfg: RunConfig, fit: trainer.Fit | None = None, backend: Backend = REAL) -> None:
        self.cfg = cfg
        self.backend = backend  # where each trial's job trains: really, or replayed (bench/replay_backend.py)
        self.fit = fit if fit is not None else load_fit(cfg)
        self.name = fit_name(cfg, self.fit)
        self.metrics = [o.metric for o in cfg.objectives]
        # Objectives known after every epoch drive per-epoch pruning; final-only ones (size, latency) cannot.
        self.epoch_metrics = [m for m in self.metrics if per_epoch(m)]
        self.pareto = pruners.pareto_pruner(cfg)  # over those same per-epoch objectives
        # vs_front compares the quality objective (accuracy, or the first one that is not a clock or a size)
        quality = [o for o in cfg.objectives if is_quality(o.metric)]
        self.quality = (quality[0].metric, str(quality[0].direction)) if quality else ("val_accuracy", "maximize")
        self._said: set[str] = set()  # warnings logged in this run (once each)
        self.failures = Failures(self.name, cfg.study.max_repeated_errors)  # and their streak
        # the speed probe: what the study knows of each throughput combination (opened once per trial, in `_run`)
        self.gate = probe.Gate(cfg, self.fit, write=records.write_study)
        # study.strategy: the space joint, or narrowed by probes
        self.points = strategy.StrategyPoints(cfg, self.fit, write=records.write_study)
        self.rules = StudyRules(cfg, self.metrics, self.epoch_metrics, self.pareto, self.quality, self._say)
        self.attempts = Attempts(cfg, self.fit, backend, self.rules, self.failures, self._watched, self._say)
        self.judge = Judge(cfg, self.fit, self.metrics, self.rules, self.failures)
        self.watch: watchdog.Watch | None = None  # the run's watchdog, while `watching`
        self.interrupted = False  # Ctrl-C (or SIGTERM) stopped a trial: the run ends after recording it
        self.growth = growth.Growth(cfg.pruning.max_host_memory_mb)  # the process's memory between trials
        self.grown: str | None = None  # why the run stopped on memory grown across trials (growth.py)

    @property
    def cpu_cap(self) -> int | None:
        """Torch threads for the next CPU trials, once one ran oversubscribed (attempt.py)."""
        return self.attempts.cap

    @cpu_cap.setter
    def cpu_cap(self, cap: int | None) -> None:
        self.attempts.cap = cap

    @contextlib.contextmanager
    def watching(self, timeout_s: float | None, study: optuna.Study | None = None,
                 cancel: threading.Event | None = None) -> Iterator[None]:
        """Around `study.optimize`: hang_seconds, the run's timeout and host memory hold inside every trial
        (watchdog.py), and Ctrl-C ends the run after its trial is recorded (`study` is told to stop: no trial
        starts after it); it is then raised here as KeyboardInterrupt, once Optuna has told every trial's end. A
        trial the watch had to record itself (stuck) ends the run with StuckTrial. What the host's own chained
        handler raised (its `sys.exit`) is raised here as the host's; SIGTERM where the host kept the default handler
        is `Terminated` (the run sends it again once it has ended: runner.run)."""
        with watchdog.Watch(timeout_s, watchdog.MemoryGuard(self.cfg.pruning.max_host_memory_mb),
                            on_interrupt=study.stop if study is not None else None, cancel=cancel) as watch:
            self.watch = watch
            try:
                yield
            except Exception:
                if watch.stuck is None:
                    raise  # (else: Optuna could not tell the trial the watch recorded; said below)
            finally:
                self.watch = None
        if watch.host_exit is not None:  # the host's own handler asked to exit (sys.exit): its exit, now
            raise watch.host_exit
        if watch.reraise is not None:  # SIGTERM with the host's default handler: ends the host once the run is done
            raise watchdog.Terminated(watch.reraise)
        if watch.stuck is not None:
            raise watchdog.StuckTrial(f"{self.name}: a trial stopped ({watch.stuck[0]}): {watch.stuck[1]}; its end "
                                      "was recorded and the run stopped (finished trials are kept)")
        if watch.cancelled:
            return  # the caller asked for it: the run returns its study (the cancelled trial recorded interrupted)
        if watch.interrupted or self.interrupted:
            raise KeyboardInterrupt
        if self.grown is not None:
            raise growth.MemoryGrowth(f"{self.name}: {self.grown}")

    def __call__(self, trial: optuna.Trial) -> float | list[float]:
        # The trial's record is written once, when it ends, whichever way it ends (records.py).
        buffered = records.BufferedTrial(trial, self.epoch_metrics)
        try:
            return self._run(buffered)
        finally:
            buffered.flush()
            self._between_trials(trial, buffered.record.stop_reason == "oom" and
                                 "pruning.max_host_memory_mb" in str(buffered.record.stop_detail))

    def _between_trials(self, trial: optuna.Trial, over_cap: bool) -> None:
        """The process's memory once the trial is gone (what survived it): grown across trials, the study stops
        (growth.py; said by `watching` when the run ends)."""
        if not self.backend.real or self.grown is not None:
            return
        gc.collect()  # (only what trials made: the run's survivors are frozen out of the collector)
        why = self.growth.after(trial.number, hostmem.rss_mb(), over_cap)
        if why is not None:
            self.grown = why
            trial.study.stop()  # takes effect once this trial is told

    def _run(self, trial: records.BufferedTrial) -> float | list[float]:
        """The trial's stages: plan, admit, train, judge, record (the module's doc)."""
        self.backend.tidy(accel.freeze_survivors)
        try:
            point = self.points.sample(trial.trial)
        except (optuna.TrialPruned, AutotuneError):
            raise
        except Exception as e:  # the sampler's own (its args, a space the stored trials disagree with): stored, counted
            self.failures.fail(trial.record, e, 0)
        plan = TrialPlan.for_trial(self.cfg, point, trial.number, cap=self.cpu_cap)
        if self.attempts.start_cap(plan) is not None:  # busy cores before the first trial: it starts capped
            plan = TrialPlan.for_trial(self.cfg, point, trial.number, cap=self.cpu_cap)
        records.planned(trial.record, plan)
        speed = self.gate.open(trial.trial, plan, trial.record)  # its speed probe: admit checks it, train times it
        admit(trial, plan, self.points, speed, self.failures)
        try:
            result = self.attempts.train(trial, speed)
        finally:
            self.backend.tidy(accel.after_trial)
        out = self.judge.values(trial, result)
        self._record(trial, plan, result)
        return out if len(out) > 1 else out[0]

    def _record(self, trial: records.BufferedTrial, plan: TrialPlan, result: TrainResult) -> None:
        """What the trained trial stores (records.trained); a chosen lr that multiplied the fit's own optimizer's
        group lrs is said once per run (each trial's rates are in its record)."""
        records.trained(trial.record, plan, result)
        if result.effective_lrs is not None:
            own, effective = result.effective_lrs
            self._say(f"{lr_scaling_text(plan.settings.lr, own, effective)} (trial {trial.number}; each "
                      "trial's rates are its user attr effective_lrs)", once="effective_lrs")

    def _say(self, text: str, once: str | None = None) -> None:
        """A run message, logged once per run (per `once` key, else per text) as one plain line: `warning: NAME:
        text` on the run's console (not Python's warnings, which print autotune's own file and line)."""
        key = once or text
        if key not in self._said:
            self._said.add(key)
            log.warning(f"warning: {self.name}: {text}")

    def _watched(self, trial: records.BufferedTrial, train: Callable[[], TrainResult], epochs: Callable[[], int],
                 devices: int) -> TrainResult:
        """`train()` under the run's watch: past hang_seconds, past the run's deadline or on Ctrl-C the trial stops
        (TrialStopped: hang, timeout, interrupted; the last two end the run), wherever its code is; host memory
        running short is an out-of-memory (MemoryError)."""
        if self.watch is None:
            return train()
        # several devices: the ranks check the hang limit together, and their launcher ends them past it (supervisor.py)
        hang_s = self.cfg.pruning.slow.hang_seconds if devices == 1 else None
        try:
            return self.watch.run(train, hang_s, functools.partial(self._stuck, trial, epochs))
        except watchdog.Interrupted as e:
            where = user_where(e)
            reason, detail = e.reason, e.detail + (f" (at {where})" if where else "")
        # (raised outside the except block: no traceback keeps the trial's tensors alive)
        if reason == "oom":
            raise MemoryError(detail)
        if reason in ("timeout", "interrupted"):
            trial.study.stop()  # takes effect once this trial is told
            self.interrupted = self.interrupted or reason == "interrupted"
        raise TrialStopped(reason, epochs(), detail)

    def _stuck(self, trial: records.BufferedTrial, epochs: Callable[[], int], reason: str, detail: str) -> None:
        """The watch thread's last resort for a trial that did not stop when interrupted: its end recorded (PRUNED,
        with the reason), one line; then the program ends its process, a library stops the run (watchdog.py)."""
        text = f"{self.name}: trial {trial.number} stopped ({reason}): {detail}"
        ended = "ended the process" if lifetime.is_program() else "stopped the run (the process goes on)"
        try:
            state = TrialState.FAIL if reason in RUN_ENDED else TrialState.PRUNED
            trial.record.stopped(reason, epochs(), detail[:500],
                                 error=f"{reason}: {detail}"[:500] if state == TrialState.FAIL else None)
            trial.end_now(state)
            text += f"; recorded it {state.name} ({reason}) and {ended} (finished trials are kept)"
        except Exception as e:  # the storage itself failed: the orphan reaper of the next run fails the trial
            text += f"; could not record it ({describe_exception(e)}); {ended}"
        print(f"error: {text}", file=sys.stderr, flush=True)


def watching(objective: Any, timeout_s: float | None, study: optuna.Study | None = None,
             cancel: threading.Event | None = None) -> contextlib.AbstractContextManager[None]:
    """`Objective.watching` for an Objective (or one wrapped in `.inner`), else nothing (a caller's own callable)."""
    while not isinstance(objective, Objective) and hasattr(objective, "inner"):
        objective = objective.inner
    return objective.watching(timeout_s, study, cancel) if isinstance(objective, Objective) else \
        contextlib.nullcontext()


def interrupted(objective: Any) -> bool:
    """The run an Objective (or one wrapped in `.inner`) serves was interrupted (Ctrl-C, SIGTERM)."""
    while not isinstance(objective, Objective) and hasattr(objective, "inner"):
        objective = objective.inner
    return isinstance(objective, Objective) and (objective.interrupted or (objective.watch is not None and
                                                                         objective.watch.interrupted))


__all__ = ["Objective", "interrupted", "watching"]
