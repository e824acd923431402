"""The only bridge between Optuna and torch: trial -> settings -> train -> values and user attrs.

A trial's training either finishes (values returned), stops early (`optuna.TrialPruned`, the reason
stored), or fails: the exception's type, message and place in the user's code are stored, the study
goes on, and `study.max_repeated_errors` failures in a row with the same error stop the run cleanly.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

import optuna
import torch
from optuna.trial import TrialState

from autotune.core import (
    AutotuneError,
    ConfigError,
    TrialStopped,
    code_where,
    contention,
    describe_exception,
    is_quality,
    per_epoch,
    user_where,
    watchdog,
)
from autotune.core import optuna_compat as compat
from autotune.fit import REAL, Backend, fit_name, job_for, load_fit, searched_keys, trainer, trial_seed
from autotune.search import EPOCH_VALUES, lr_scaling_text, pruners
from autotune.spec import RunConfig
from autotune.speed import probe, strategy
from autotune.study import records
from autotune.training import ContextMisuse, EpochRecord, TrainResult, accel


class TrialFailed(Exception):
    """A trial's training raised: the trial ends FAIL with this one-line text and the study goes on."""


class RunEnded(TrialFailed):
    """The run ended around a trial (Ctrl-C, SIGTERM, the run's timeout): FAIL, not a verdict on its settings (it
    is not counted among the finished trials, and teaches the sampler nothing); said by the run, not per trial."""


# Stopped by the run, not by a rule about the trial: such a trial ends FAIL (RunEnded) with its stop_reason.
RUN_ENDED = ("timeout", "interrupted")


class RepeatedFailure(AutotuneError):
    """The same error ended several trials in a row: the run stops instead of failing trial after trial."""


class FatalDeviceError(AutotuneError):
    """An error after which the process's CUDA context is unusable (illegal address, device-side assert)."""


log = logging.getLogger(__name__)
PRUNING_OFF = "pruning_off"  # user attr: why the study's per-epoch pruner could not act on this trial

# Caught by study.optimize (the trial is FAIL, the study goes on); anything else stops the run.
CATCH = (TrialFailed, RuntimeError, ValueError, TypeError, ArithmeticError, MemoryError)


class _NoTraceback(logging.Filter):
    """Optuna logs a failed trial twice (its error, then "failed with value None"). A failure of ours (TrialFailed,
    an AutotuneError) is already said once, by the run's trial line or its one-line error: both of Optuna's lines are
    dropped. Any other failure keeps its lines, without the traceback only where ours carry their one-line story."""

    def __init__(self) -> None:
        super().__init__()
        self.silent: set[str] = set()  # "Trial N " of trials whose failure is not news

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        head = " ".join(record.getMessage().split(" ", 2)[:2]) + " "
        if isinstance(exc, (TrialFailed, AutotuneError)):  # (RunEnded too: the run says why it ended, once)
            self.silent.add(head)
            return False
        if exc is None and head in self.silent:  # Optuna's second line: "Trial N failed with value None."
            self.silent.discard(head)
            return False
        return True


def quiet_failures() -> contextlib.AbstractContextManager[None]:
    """Around a `study.optimize` of our objective: Optuna logs its failed trials without the traceback (only for
    the block: Optuna's logger is left as it was)."""
    return compat.optimize_log_filter(_NoTraceback())


class FailureStreak:
    """Counts trials in a row that failed with the same error (type, place, message)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.signature: str | None = None
        self.count = 0

    def failed(self, exc: BaseException) -> bool:
        """Record a failure; True once `limit` trials in a row failed this same way."""
        return self.saw(describe_exception(exc, limit=300))

    def saw(self, error: str) -> bool:
        """Record a failure by its one line (`describe_exception`): a trial stopped because its combination
        failed before (the speed probe) repeats that error without running it."""
        self.count = self.count + 1 if error == self.signature else 1
        self.signature = error
        return self.count >= self.limit

    def reset(self) -> None:
        self.signature, self.count = None, 0


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
        self.streak = FailureStreak(cfg.study.max_repeated_errors)
        self.gate = probe.Gate(cfg, self.fit)  # the speed probe: what the study knows of each throughput combination
        self.cpu_cap: int | None = None  # torch threads for the next CPU trials, once one ran oversubscribed
        self.search = strategy.Search(cfg, self.fit)  # study.strategy: the space joint, or narrowed by probes
        self._said: set[str] = set()  # warnings logged in this run (once each)
        self.watch: watchdog.Watch | None = None  # the run's watchdog, while `watching`
        self.interrupted = False  # Ctrl-C (or SIGTERM) stopped a trial: the run ends after recording it

    @contextlib.contextmanager
    def watching(self, timeout_s: float | None) -> Iterator[None]:
        """Around `study.optimize`: hang_seconds, the run's timeout and host memory hold inside every trial
        (watchdog.py), and Ctrl-C ends the run after its trial is recorded; it is then raised here as
        KeyboardInterrupt, once Optuna has told every trial's end."""
        with watchdog.Watch(timeout_s, watchdog.MemoryGuard(self.cfg.pruning.max_host_memory_mb)) as watch:
            self.watch = watch
            try:
                yield
            finally:
                self.watch = None
        if watch.interrupted or self.interrupted:
            raise KeyboardInterrupt

    def __call__(self, trial: optuna.Trial) -> float | list[float]:
        # The trial's user attrs are written once, when it ends, whichever way it ends (records.py).
        buffered = records.BufferedTrial(trial)
        try:
            return self._run(buffered)  # type: ignore[arg-type]
        finally:
            buffered.flush()

    def _run(self, trial: optuna.Trial) -> float | list[float]:
        cfg = self.cfg
        self.backend.tidy(accel.freeze_survivors)
        values = self.search.sample(trial)
        seed = trial_seed(cfg, trial.number)
        trial.set_user_attr("seed", seed)
        trial.set_user_attr("settings", values)
        dev = accel.resolve_device(values["device"])
        trial.set_user_attr("device", accel.device_name(dev, values.get("cpu_threads") or None))  # the trial's threads
        trial.set_user_attr("precision", values["precision"])
        why = accel.precision_error(str(dev), values["precision"])
        if why is not None:
            self._stop(trial, "unsupported", 0, f"precision {values['precision']} on {dev}: {why}")
        try:
            self.search.check(values)  # probe_then_tune dropped this combination
            self.gate.check(trial, values)  # known to fail here, or too slow: stopped before it trains
        except TrialStopped as e:
            known = self.gate.known_error(trial, values) if e.reason == "unsupported" else None
            if known is not None and self.streak.saw(known):
                self._record_failure_text(trial, known, 0)
                raise self._repeated(known) from None
            self._stop(trial, e.reason, e.epoch, e.detail)
        try:
            result = self._train(trial, values, seed)
        finally:
            self.backend.tidy(accel.after_trial)
        metrics = result.metrics()
        missing = [m for m in self.metrics if m not in metrics]
        if missing and not any(r.metrics for r in result.history):
            self._fail(trial, ContextMisuse(
                f"{self.name} never called ctx.report(...) with a metric in its {result.epochs_run} epoch(s) and "
                f"returned no {', '.join(missing)}: report the objectives ({', '.join(missing)}) once per epoch, "
                f"inside `for epoch in ctx.epochs()`: ctx.report({missing[0]}=...)", at=code_where(self.fit)),
                result.epochs_run)
        if missing:
            self._fail(trial, ContextMisuse(f"{self.name} never reported {', '.join(missing)} (an objective): "
                                            f"ctx.report({missing[0]}=...) each epoch, or return {{{missing[0]!r}: "
                                            "...}", at=code_where(self.fit)), result.epochs_run)
        self.streak.reset()  # (after the checks above: a fit that never reports fails the same way every trial)
        if not any(r.metrics for r in result.history):
            self._returned_only(trial, result)
        out = [float(metrics[m]) for m in self.metrics]
        bad = [m for m, v in zip(self.metrics, out) if not math.isfinite(v)]
        if bad:  # an objective never returns NaN (one fit returned at the end: per-epoch ones stopped there)
            self._stop(trial, "diverged", result.epochs_run, f"non-finite {bad[0]} (an objective)")
        for key, value in metrics.items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("epochs_run", result.epochs_run)
        self._record_applied(trial, values, result)
        if result.stopped_early_at is not None:  # a finished trial: values are its last epoch's
            trial.set_user_attr("stop_reason", "early_stopped")
            trial.set_user_attr("stop_epoch", result.stopped_early_at)
        self._constrain(trial, result, metrics)
        trial.set_user_attr("meters", result.meters)  # what measured peak_memory_mb and energy_j, or why not
        return out if len(out) > 1 else out[0]

    def _constrain(self, trial: optuna.Trial, result: TrainResult, metrics: dict[str, float]) -> None:
        """`constraints:` as Optuna's (feasible when <= 0; samplers read them, the front leaves the others out)."""
        c = self.cfg.constraints
        if c.max_accuracy_drop is not None and "val_accuracy_before_compress" in result.extra:
            drop = result.extra["val_accuracy_before_compress"] - result.val_accuracy
            trial.set_constraint("accuracy_drop", drop - c.max_accuracy_drop)
        for metric, cap in c.caps().items():  # (validation made sure each is measured where the study runs)
            if metric in metrics:
                trial.set_constraint(metric, float(metrics[metric]) - cap)

    def _train(self, trial: optuna.Trial, values: dict[str, Any], seed: int) -> TrainResult:
        """Train; on out-of-memory, with `oom: retry_smaller_batch`, once more at half the batch sizes.

        Every failed attempt is left (its exception and frames dropped) before memory is released and the
        retry starts: inside an `except` block the traceback would keep the model, the optimizer state and
        the on-device data alive, and the retry would run out of memory again."""
        retried = False
        while True:
            outcome = self._attempt(trial, values, seed)
            if isinstance(outcome, TrainResult):
                return outcome
            self.backend.tidy(accel.release_memory)  # nothing of the failed attempt is referenced any more
            oom, epoch = outcome
            if self.cfg.pruning.oom == "retry_smaller_batch" and values["batch_size"] > 1 and not retried:
                retried = True
                values = {**values, **{k: max(1, int(values[k]) // 2) for k in
                                       ("batch_size", "eval_batch_size", "infer_batch_size")}}
                trial.set_user_attr("oom_retried", True)
                trial.set_user_attr("batch_size_used", values["batch_size"])
                continue
            self._stop(trial, "oom", epoch, oom)

    def _attempt(self, trial: optuna.Trial, values: dict[str, Any], seed: int) -> TrainResult | tuple[str, int]:
        """One training run: its result, or (what ran out of memory, epoch). Stops and failures are raised
        only after leaving the `except` block, so no traceback keeps the run's tensors alive."""
        history: list[dict[str, Any]] = []
        epoch_values: list[list[float]] = []
        stop: TrialStopped | None = None
        failure: BaseException | None = None
        fatal = False
        oom: str | None = None

        def on_record(rec: EpochRecord) -> None:
            d = rec.as_dict()
            history.append(d)
            epoch_values.append([float(d[m]) if m in d else math.nan for m in self.epoch_metrics])
            trial.set_user_attr("history", history)  # buffered: written once, when the trial ends
            trial.set_user_attr(EPOCH_VALUES, epoch_values)

        def on_epoch(rec: EpochRecord) -> None:
            # (the trial's planned epochs: a framework's own count where the trial left epochs to the recipe)
            self._study_rules(trial, rec, history, epoch_values, rec.epochs_planned or int(values["epochs"]))

        # an unknown combination: its first steps are timed (in this process: a trial on several devices is
        # measured by its whole run instead, in Gate.finished)
        window = self.gate.window(trial, values) if int(values.get("devices", 1)) == 1 else None
        capped = self._capped(values)
        if capped is not None:
            trial.set_user_attr("cpu_threads_capped", capped)
        self._record_threads(trial, values, capped)
        try:
            with contention.torch_threads(capped):
                cpu = contention.Window(int(values["cpu_threads"]) or torch.get_num_threads())
                job = job_for(self.cfg, values, seed, fit=self.fit, probe=window,
                              searched=searched_keys(self.cfg, values))
                result = self._watched(trial, lambda: self.backend.train(job, on_epoch=on_epoch, on_record=on_record,
                                                                         keep_model=False), lambda: len(history),
                                       int(values.get("devices", 1)))
            self._measured(trial, values, window, result, cpu)
            return result
        except TrialStopped as e:
            stop = TrialStopped(e.reason, e.epoch, e.detail)  # a fresh one: no traceback, no frames
        except ConfigError:
            raise  # the configuration itself is wrong: no trial can run
        except (Exception, SystemExit) as e:  # sys.exit() or exit() in the fit: that trial fails, the study goes on
            if accel.is_oom(e):
                oom = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            else:
                self.gate.failed(trial, values, window, e)  # before the frames go: they say whose failure it is
                failure = _without_frames(e)
                fatal = accel.is_fatal_device_error(e)
        if stop is not None:
            self.backend.tidy(accel.release_memory)
            self._stop(trial, stop.reason, stop.epoch, stop.detail)
        if failure is not None:
            if fatal:  # the CUDA context is broken: every later trial in this process would fail too
                self._record_failure(trial, failure, len(history))
                raise FatalDeviceError(f"{self.name}: {describe_exception(failure)}: the device cannot be used "
                                       "by this process any more; stopped (finished trials are kept; start the "
                                       "run or worker again)")
            self.backend.tidy(accel.release_memory)
            self._fail(trial, failure, len(history))
        assert oom is not None
        return oom, len(history)

    def _measured(self, trial: optuna.Trial, values: dict[str, Any], window: Any, result: TrainResult,
                  cpu: contention.Window) -> None:
        """A trained trial's samples/s become its combination's probe reading, unless its threads waited for cores
        (`_oversubscribed`); a backend with no CPU of its own (a replay) is read as it reports."""
        if not self.backend.real:
            self.gate.finished(trial, values, window, result)
        elif not self._oversubscribed(trial, values, result, cpu):
            self.gate.finished(trial, values, window, result, contended=contention.contended(cpu.share()))

    def _watched(self, trial: optuna.Trial, train: Callable[[], TrainResult], epochs: Callable[[], int],
                 devices: int) -> TrainResult:
        """`train()` under the run's watch: past hang_seconds, past the run's deadline or on Ctrl-C the trial stops
        (TrialStopped: hang, timeout, interrupted; the last two end the run), wherever its code is; host memory
        running short is an out-of-memory (MemoryError)."""
        if self.watch is None:
            return train()
        # several devices: the ranks check the hang limit together, and their launcher ends them past it (supervisor.py)
        hang_s = self.cfg.pruning.slow.hang_seconds if devices == 1 else None
        try:
            with self.watch.trial(hang_s, functools.partial(self._stuck, trial, epochs)):
                return train()
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

    def _stuck(self, trial: optuna.Trial, epochs: Callable[[], int], reason: str, detail: str) -> None:
        """The watch thread's last resort for a trial that did not stop when interrupted: its end recorded (PRUNED,
        with the reason), one line, and the process ends (watchdog.Watch._stuck)."""
        text = f"{self.name}: trial {trial.number} stopped ({reason}): {detail}"
        try:
            state = TrialState.FAIL if reason in RUN_ENDED else TrialState.PRUNED
            attrs = {"stop_reason": reason, "stop_epoch": epochs(), "stop_detail": detail[:500],
                     **({"error": f"{reason}: {detail}"[:500]} if state == TrialState.FAIL else {})}
            trial.end_now(state, attrs)  # type: ignore[attr-defined]
            text += f"; recorded it {state.name} ({reason}) and ended the process (finished trials are kept)"
        except Exception as e:  # the storage itself failed: the orphan reaper of the next run fails the trial
            text += f"; could not record it ({describe_exception(e)}); ended the process"
        print(f"error: {text}", file=sys.stderr, flush=True)

    def _study_rules(self, trial: optuna.Trial, rec: EpochRecord, history: list[dict[str, Any]],
                     epoch_values: list[list[float]], epochs: int) -> None:
        """The stop rules that need the study: vs_front, Optuna's pruner (one objective), Pareto pruning."""
        p = self.cfg.pruning
        d = history[-1]
        metric, direction = self.quality
        if p.slow.vs_front is not None and rec.epoch < epochs and metric in d:
            pruners.check_vs_front(rec.train_time_s, rec.epoch, epochs, float(d[metric]), p.slow.vs_front,
                                   pruners.front_of(trial.study, self.cfg), metric, direction)
        if rec.epoch >= epochs:
            return
        # an epoch the fit reported nothing in: not a pruning question (a fit that never reports fails at its end)
        reported = bool(rec.metrics)
        if not self.cfg.multi_objective:
            if self.metrics[0] in d:
                trial.report(float(d[self.metrics[0]]), rec.epoch)
                if trial.should_prune():
                    raise TrialStopped("pruned", rec.epoch, "Optuna pruner")
            elif reported and per_epoch(self.metrics[0]) and pruners.resolved_name(self.cfg) != "none":
                self._pruning_off(trial, "pruning", [self.metrics[0]])
        elif self.pareto is not None and (unreported := [m for m in self.epoch_metrics if m not in d]):
            if not reported:
                return
            # dominance on the other objectives alone would throw away a trial better on the one not known yet
            self._pruning_off(trial, "Pareto pruning", unreported)
        elif self.pareto is not None and all(math.isfinite(v) for v in epoch_values[-1]):
            step = len(epoch_values)
            if not self.pareto.judges(step, epochs):  # (pareto_asha: rung epochs only) no storage read
                return
            finished = trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
            why = self.pareto.stop(epoch_values[-1], step, finished, epochs, curve=epoch_values)
            if why is not None:
                raise TrialStopped("dominated", step, why)

    def _returned_only(self, trial: optuna.Trial, result: TrainResult) -> None:
        """A fit that reported nothing in its epochs and returned its objectives at the end: the per-epoch pruner
        never saw them. Said here, not at the epochs (a fit that never reports at all fails instead)."""
        if result.epochs_run < 2 or not result.history:
            return
        clocks = result.history[-1].as_dict()  # train_time_s and the other clocks: known every epoch
        if not self.cfg.multi_objective:
            if per_epoch(self.metrics[0]) and pruners.resolved_name(self.cfg) != "none":
                self._pruning_off(trial, "pruning", [self.metrics[0]])
        elif self.pareto is not None and (unreported := [m for m in self.epoch_metrics if m not in clocks]):
            self._pruning_off(trial, "Pareto pruning", unreported)

    def _pruning_off(self, trial: optuna.Trial, what: str, unreported: list[str]) -> None:
        """Said once, at the trial's first epoch without them (user attr `pruning_off`), and logged once per run:
        the study's per-epoch pruner cannot judge a trial on objectives it does not see each epoch."""
        if PRUNING_OFF in trial.user_attrs:
            return
        names = ", ".join(unreported)
        text = (f"{what} is off for this trial: {names} {'is' if len(unreported) == 1 else 'are'} not reported "
                f"every epoch (ctx.report({unreported[0]}=...) in each epoch turns it on)")
        trial.set_user_attr(PRUNING_OFF, text)
        self._say(text)

    def _say(self, text: str, once: str | None = None) -> None:
        """A run message, logged once per run (per `once` key, else per text) as one plain line: `warning: NAME:
        text` on the run's console (not Python's warnings, which print autotune's own file and line)."""
        key = once or text
        if key not in self._said:
            self._said.add(key)
            log.warning(f"warning: {self.name}: {text}")

    def _record_applied(self, trial: optuna.Trial, values: dict[str, Any], result: TrainResult) -> None:
        """What shaped the trial: searched settings that did not (`not_applied`); the stored settings without any
        that did not (a default optimizer adam nothing stepped); the rates a chosen lr gave the fit's own groups."""
        if result.not_applied:
            trial.set_user_attr("not_applied", result.not_applied)
        if result.unused:
            trial.set_user_attr("settings", {k: v for k, v in values.items() if k not in result.unused})
        if result.recipe:  # settings left to the user's code or the framework's defaults, with what they held
            trial.set_user_attr("recipe", result.recipe)
        if result.effective_lrs is None:
            return
        own, effective = result.effective_lrs
        trial.set_user_attr("effective_lrs", effective)  # (user attrs: stored with the trial, read by best/export)
        trial.set_user_attr("own_group_lrs", own)
        lr = float(values["lr"])
        if "effective_lrs" not in self._said:
            self._said.add("effective_lrs")
            log.warning(f"warning: {self.name}: {lr_scaling_text(lr, own, effective)} (trial {trial.number}; each "
                        "trial's rates are its user attr effective_lrs)")

    def _oversubscribed(self, trial: optuna.Trial, values: dict[str, Any], result: TrainResult,
                        cpu: contention.Window) -> bool:
        """A CPU trial whose threads waited for cores (another busy process here): when its samples/s collapsed
        against the probe's figure for its combination (or the probe's own window was contended), user attr
        `oversubscribed` says so, a warning says it once, and later trials of this process use half the threads."""
        if accel.resolve_device(values["device"]).type != "cpu":
            return False
        share = cpu.share()
        if not contention.contended(share):
            return False
        probe_rec = trial.user_attrs.get("probe") or {}
        ref = None if probe_rec.get("contended") else probe_rec.get("samples_per_s")
        threads = cpu.threads or torch.get_num_threads()
        found = contention.verdict(result.samples_per_s, ref, share, threads)
        if found is None:
            return False
        trial.set_user_attr("oversubscribed", found)
        if not values["cpu_threads"]:  # a user's cpu_threads is theirs to measure
            self.cpu_cap = contention.lower_cap(self.cpu_cap, threads)
        self._say(contention.warning(trial.number, found, self.cpu_cap), once="oversubscribed")
        return True

    @staticmethod
    def _record_threads(trial: optuna.Trial, values: dict[str, Any], capped: int | None) -> None:
        """A CPU trial's `device` says the threads it really trains on; where autotune chose them (a cap after an
        oversubscribed trial, one less per DataLoader worker) user attr `cpu_threads_used` keeps the count, and
        `best --export` writes it as `cpu_threads` so the export trains as the trial did."""
        dev = accel.resolve_device(values["device"])
        if dev.type != "cpu":
            return
        default = torch.get_num_threads()
        used = contention.trial_threads(values, capped, torch_default=default)
        trial.set_user_attr("device", accel.device_name(dev, used))
        if not values["cpu_threads"] and used != default:
            trial.set_user_attr("cpu_threads_used", used)

    def _capped(self, values: dict[str, Any]) -> int | None:
        """After an oversubscribed trial, the next CPU trials run on fewer torch threads (where the user left
        cpu_threads at 0, torch's default). Their probe combination stays the same: the study's figure for it is
        the one their speed is compared with."""
        if self.cpu_cap is None or values["cpu_threads"] or accel.resolve_device(values["device"]).type != "cpu":
            return None
        return self.cpu_cap

    @staticmethod
    def _record_failure_text(trial: optuna.Trial, text: str, epoch: int) -> str:
        trial.set_user_attr("stop_reason", "error")
        trial.set_user_attr("stop_epoch", epoch)
        trial.set_user_attr("error", text)
        return text

    def _record_failure(self, trial: optuna.Trial, exc: BaseException, epoch: int) -> str:
        return self._record_failure_text(trial, describe_exception(exc, limit=500), epoch)

    def _repeated(self, text: str) -> RepeatedFailure:
        return RepeatedFailure(f"{self.name}: {self.streak.count} trials in a row failed with {text}; stopped the "
                               "run (finished trials are kept)")

    def _fail(self, trial: optuna.Trial, exc: BaseException, epoch: int) -> None:
        """The trial ends FAIL with the error's one line stored; a repeated error stops the run."""
        text = self._record_failure(trial, exc, epoch)
        if self.streak.failed(exc):
            raise self._repeated(text)
        raise TrialFailed(text)

    @staticmethod
    def _stop(trial: optuna.Trial, reason: str, epoch: int, detail: str) -> None:
        trial.set_user_attr("stop_reason", reason)
        trial.set_user_attr("stop_epoch", epoch)
        if detail:
            trial.set_user_attr("stop_detail", detail[:500])
        text = f"{reason} at epoch {epoch}: {detail}" if detail else reason
        if reason in RUN_ENDED:
            trial.set_user_attr("error", text)
            raise RunEnded(text)
        raise optuna.TrialPruned(text)


def watching(objective: Any, timeout_s: float | None) -> contextlib.AbstractContextManager[None]:
    """`Objective.watching` for an Objective (or one wrapped in `.inner`), else nothing (a caller's own callable)."""
    while not isinstance(objective, Objective) and hasattr(objective, "inner"):
        objective = objective.inner
    return objective.watching(timeout_s) if isinstance(objective, Objective) else contextlib.nullcontext()


def interrupted(objective: Any) -> bool:
    """The run an Objective (or one wrapped in `.inner`) serves was interrupted (Ctrl-C, SIGTERM)."""
    while not isinstance(objective, Objective) and hasattr(objective, "inner"):
        objective = objective.inner
    return isinstance(objective, Objective) and (objective.interrupted or (objective.watch is not None and
                                                                         objective.watch.interrupted))


def _without_frames(exc: BaseException) -> BaseException:
    """The exception with only the traceback's innermost user frame summary kept as text: the frames
    themselves (and the tensors their locals hold) are released."""
    where = user_where(exc)
    exc.__traceback__ = None
    exc.__context__ = None
    exc.__cause__ = None
    if hasattr(exc, "__dict__"):
        exc.__dict__.setdefault("_autotune_where", where)
    return exc


__all__ = ["CATCH", "RUN_ENDED", "FailureStreak", "FatalDeviceError", "Objective", "RepeatedFailure", "RunEnded",
           "TrialFailed", "interrupted", "watching"]
