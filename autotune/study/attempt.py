"""The train stage of a trial: its plan trained once under the run's watch, and once more at half the batch sizes
after running out of memory (`pruning.oom: retry_smaller_batch`).

Each epoch, an `EpochRecord`, goes to the trial (`BufferedTrial.epochs`, flattened into its record's `history`
and `epoch_values` only when records.py writes it) and the study's stop rules judge it. A trained trial's samples/s
become its combination's speed-probe reading, unless its threads waited for cores: then it is
`oversubscribed`, and later CPU trials of this process train on fewer threads (`cap`). A stop or a failure is
raised only after its `except` block is left, with the exception's frames dropped: inside that block the traceback
would keep the model, the optimizer state and the on-device data alive, and a retry would run out of memory again.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from autotune.core import ConfigError, TrialStopped, contention, describe_exception, user_where
from autotune.fit import Backend, TrialPlan, trainer
from autotune.spec import RunConfig, TrialRecord
from autotune.speed import TrialProbe
from autotune.study import outcome, records
from autotune.study.epoch_rules import StudyRules
from autotune.study.records import BufferedTrial
from autotune.training import EpochRecord, ProbeWindow, TrainResult, accel, shaped_by

# `watched(trial, train, epochs_so_far, devices)`: `train()` under the run's watchdog (Objective._watched)
Watched = Callable[[BufferedTrial, Callable[[], TrainResult], Callable[[], int], int], TrainResult]


class Attempts:
    """One run's train stage: what each trial trains with, and the thread cap its oversubscribed trials leave."""

    def __init__(self, cfg: RunConfig, fit: trainer.Fit | None, backend: Backend, rules: StudyRules,
                 failures: outcome.Failures, watched: Watched, say: Callable[..., None]) -> None:
        self.cfg, self.fit, self.backend = cfg, fit, backend
        self.rules, self.failures, self.watched, self.say = rules, failures, watched, say
        self.cap: int | None = None  # torch threads for the next CPU trials, once one ran oversubscribed
        self.checked = False  # the cores were checked before this run's first CPU trial (`start_cap`)

    def start_cap(self, plan: TrialPlan) -> int | None:
        """Before this run's first CPU trial that autotune chooses the threads of: when its threads wait for cores
        already (contention.busy_now), the cap an oversubscribed trial would leave, said once; else None. A user's
        cpu_threads is theirs; a later trial is judged by the trial before it (`_oversubscribed`)."""
        if self.checked or plan.threads is None or plan.threads.cap is not None or plan.settings.cpu_threads \
                or not self.backend.real:
            return None
        self.checked = True
        share = contention.busy_now(plan.threads.used)
        if share is None:
            return None
        self.cap = contention.lower_cap(None, plan.threads.used)
        self.say(f"the cores are busy: {plan.threads.used} torch threads waited for a core {share.waiting:.0%} of "
                 f"a {share.wall_s:.1f} s check before the first trial (other processes on these "
                 f"{contention.cores()} cores); trials start at {self.cap} thread(s) (user attr cpu_threads_capped)",
                 once="busy_at_start")
        return self.cap

    def train(self, trial: BufferedTrial, probe: TrialProbe) -> TrainResult:
        """Train the plan of the trial's `probe` (opened by the objective, checked by admit); on out-of-memory, with
        `oom: retry_smaller_batch`, once more at half the batch sizes (that plan's probe: another combination).
        Every failed attempt is left (its exception and frames dropped) before memory is released and the retry
        starts."""
        retried, sampled = False, probe.plan
        while True:
            tried = self.attempt(trial, probe, sampled)
            if isinstance(tried, TrainResult):
                return tried
            self.backend.tidy(accel.release_memory)  # nothing of the failed attempt is referenced any more
            oom, epoch = tried
            smaller = probe.plan.halved() if self.cfg.pruning.oom == "retry_smaller_batch" and not retried else None
            if smaller is None:
                outcome.stop(trial.record, "oom", epoch, oom)
            retried, probe = True, probe.of(smaller)
            trial.record.oom_retried, trial.record.batch_size_used = True, smaller.settings.batch_size

    def attempt(self, trial: BufferedTrial, probe: TrialProbe, sampled: TrialPlan) -> TrainResult | tuple[str, int]:
        """One training run of `probe.plan`: its result, or (what ran out of memory, epoch). Stops and failures are
        raised only after leaving the `except` block, so no traceback keeps the run's tensors alive. `sampled`: the
        trial's plan before an out-of-memory retry halved it (its settings are stored as sampled, as a trained one's
        are; `batch_size_used` says the batch the retry trained)."""
        record, plan = trial.record, probe.plan
        history: list[EpochRecord] = []  # this attempt's epochs, typed until the trial's record is written

        def on_record(rec: EpochRecord) -> None:
            history.append(rec)
            trial.epochs = history  # (an attempt that recorded none leaves the one before it: records.py stores it)

        def on_epoch(rec: EpochRecord) -> None:
            self.rules.after_epoch(trial.trial, record, history, rec.epochs_planned or int(plan.settings.epochs))

        window = probe.window()  # an unknown combination: its first steps are timed
        _record_threads(record, plan)
        stop: TrialStopped | None = None
        failure: BaseException | None = None
        fatal, oom = False, None
        try:
            return self._run(trial, probe, window, on_epoch, on_record, lambda: len(history))
        except TrialStopped as e:
            stop = TrialStopped(e.reason, e.epoch, e.detail)  # a fresh one: no traceback, no frames
            records.shaped(record, sampled, shaped_by(e))  # what trained, as a finished trial stores it
        except ConfigError as e:  # the configuration itself is wrong (or the code it names): no trial can run
            self.failures.record(record, e.message, len(history))  # (the trial is stored failing with that line)
            raise
        except (Exception, SystemExit) as e:  # sys.exit() or exit() in the fit: that trial fails, the study goes on
            records.shaped(record, sampled, shaped_by(e))
            if accel.is_oom(e):
                oom = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            else:
                probe.failed(e)  # before the frames go: they say whose failure it is
                failure = _without_frames(e)
                fatal = accel.is_fatal_device_error(e)
        return self._ended(record, stop, failure, fatal, oom, len(history))

    def _run(self, trial: BufferedTrial, probe: TrialProbe, window: ProbeWindow | None,
             on_epoch: Callable[[EpochRecord], None], on_record: Callable[[EpochRecord], None],
             epochs: Callable[[], int]) -> TrainResult:
        plan = probe.plan
        cap = plan.threads.cap if plan.threads is not None else None
        with contention.torch_threads(cap):
            cpu = contention.Window(int(plan.settings.cpu_threads) or torch.get_num_threads())
            result = self.watched(trial, lambda: self.backend.train(plan.training, self.fit, probe=window,
                                                                    on_epoch=on_epoch, on_record=on_record,
                                                                    keep_model=False), epochs,
                                  int(plan.settings.devices))
        self._measured(trial, probe, result, cpu)
        return result

    def _ended(self, record: TrialRecord, stop: TrialStopped | None, failure: BaseException | None, fatal: bool,
               oom: str | None, epochs: int) -> tuple[str, int]:
        """A stopped attempt stops the trial, a failed one fails it (a broken device ends the run); an attempt
        that ran out of memory is returned: (what ran out, epochs run)."""
        if stop is not None:
            self.backend.tidy(accel.release_memory)
            outcome.stop(record, stop.reason, stop.epoch, stop.detail)
        if failure is not None:
            if fatal:  # the CUDA context is broken: every later trial in this process would fail too
                self.failures.record(record, describe_exception(failure, limit=500), epochs)
                raise outcome.FatalDeviceError(f"{self.failures.name}: {describe_exception(failure)}: the device "
                                               "cannot be used by this process any more; stopped (finished trials "
                                               "are kept; start the run or worker again)")
            self.backend.tidy(accel.release_memory)
            self.failures.fail(record, failure, epochs)
        assert oom is not None
        return oom, epochs

    def _measured(self, trial: BufferedTrial, probe: TrialProbe, result: TrainResult,
                  cpu: contention.Window) -> None:
        """A trained trial's samples/s become its combination's probe reading, unless its threads waited for cores
        (`_oversubscribed`); a backend with no CPU of its own (a replay) is read as it reports."""
        if not self.backend.real:
            probe.finished(result)
        elif not self._oversubscribed(trial.record, probe.plan, result, cpu):
            probe.finished(result, contended=contention.contended(cpu.share()))

    def _oversubscribed(self, record: TrialRecord, plan: TrialPlan, result: TrainResult,
                        cpu: contention.Window) -> bool:
        """A CPU trial whose threads waited for cores (another busy process here): when its samples/s collapsed
        against the probe's figure for its combination (or the probe's own window was contended), its record's
        `oversubscribed` says so, a warning says it once, and later trials of this process use half the threads."""
        if plan.device.type != "cpu":
            return False
        share = cpu.share()
        if not contention.contended(share):
            return False
        reading = record.probe or {}
        ref = None if reading.get("contended") else reading.get("samples_per_s")
        threads = cpu.threads or torch.get_num_threads()
        found = contention.verdict(result.samples_per_s, ref, share, threads)
        if found is None:
            return False
        record.oversubscribed = found
        if not plan.settings.cpu_threads:  # a user's cpu_threads is theirs to measure
            self.cap = contention.lower_cap(self.cap, threads)
        self.say(contention.warning(plan.number, found, self.cap), once="oversubscribed")
        return True


def _record_threads(record: TrialRecord, plan: TrialPlan) -> None:
    """A CPU trial's `device` says the threads it really trains on; where autotune chose them (a cap after an
    oversubscribed trial, one less per DataLoader worker) `cpu_threads_used` keeps the count, and `best --export`
    writes it as `cpu_threads` so the export trains as the trial did."""
    if plan.threads is None:
        return
    if plan.threads.cap is not None:
        record.cpu_threads_capped = plan.threads.cap
    record.device = plan.trained_device_name
    if plan.threads.chosen:
        record.cpu_threads_used = plan.threads.used


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


__all__ = ["Attempts"]
