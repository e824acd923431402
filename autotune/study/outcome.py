"""How a trial ends when it does not return its values, and what its record keeps of that.

It stops early (`optuna.TrialPruned`: PRUNED, its stop reason stored), the run ends around it (`RunEnded`: FAIL,
not a verdict on its settings), or it fails (`TrialFailed`: FAIL, the error's type, message and place in the user's
code stored; the study goes on, and `study.max_repeated_errors` failures in a row with the same error stop the run
cleanly: `FailureStreak`, `RepeatedFailure`).
"""

from __future__ import annotations

import contextlib
import logging
from typing import NoReturn

import optuna

from autotune.core import AutotuneError, describe_exception, error_signature
from autotune.core import optuna_compat as compat
from autotune.spec import TrialRecord


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


# Caught by study.optimize (the trial is FAIL, the study goes on); anything else stops the run.
CATCH = (TrialFailed, RuntimeError, ValueError, TypeError, ArithmeticError, MemoryError)


class _NoTraceback(logging.Filter):
    """Optuna logs a failed trial in two lines, with its traceback; ours already carry their one-line story: a
    failed trial (TrialFailed) is one line, `Trial N failed: <the error>` (a library's caller has no other view of
    it; the CLI's live view drops even that one: common.trials_shown). A trial the run ended (RunEnded), or an
    AutotuneError that ends the run, is not logged at all: the run says why it ended, once (both lines dropped)."""

    def __init__(self) -> None:
        super().__init__()
        self.silent: set[str] = set()  # "Trial N " of trials whose failure is not news

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        head = " ".join(record.getMessage().split(" ", 2)[:2]) + " "
        if isinstance(exc, RunEnded) or (isinstance(exc, AutotuneError) and not isinstance(exc, TrialFailed)):
            self.silent.add(head)  # (an AutotuneError ends the run: raised to its caller, who says it once)
            return False
        if exc is None and head in self.silent:  # Optuna's second line: "Trial N failed with value None."
            self.silent.discard(head)
            return False
        if isinstance(exc, TrialFailed):  # one clear line of ours for Optuna's two (the params are in the study)
            self.silent.add(head)
            record.msg, record.args = f"{head}failed: {exc}", None
            record.exc_info = record.exc_text = None
            return True
        return True


def quiet_failures() -> contextlib.AbstractContextManager[None]:
    """Around a `study.optimize` of our objective: Optuna logs its failed trials without the traceback (only for
    the block: Optuna's logger is left as it was)."""
    return compat.optimize_log_filter(_NoTraceback())


class FailureStreak:
    """Counts trials in a row that failed with the same error: its type at the same place in the user's code
    (core.error_signature; the message may hold a value that changes every trial), else the same text."""

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
        signature = error_signature(error)
        self.count = self.count + 1 if signature == self.signature else 1
        self.signature = signature
        return self.count >= self.limit

    def reset(self) -> None:
        self.signature, self.count = None, 0


def stop(record: TrialRecord, reason: str, epoch: int, detail: str) -> NoReturn:
    """The trial stops here: PRUNED with its reason (RunEnded, FAIL, where the run ended around it)."""
    text = f"{reason} at epoch {epoch}: {detail}" if detail else reason
    record.stopped(reason, epoch, detail[:500] if detail else None, error=text if reason in RUN_ENDED else None)
    if reason in RUN_ENDED:
        raise RunEnded(text)
    raise optuna.TrialPruned(text)


class Failures:
    """Failed trials of one run: each one's error stored; the same one `limit` times in a row stops the run."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name  # the training function's, in the messages
        self.streak = FailureStreak(limit)

    @staticmethod
    def record(record: TrialRecord, text: str, epoch: int) -> str:
        record.stopped("error", epoch, error=text)
        return text

    def fail(self, record: TrialRecord, exc: BaseException, epoch: int) -> NoReturn:
        """The trial ends FAIL with the error's one line stored; a repeated error stops the run."""
        text = self.record(record, describe_exception(exc, limit=500), epoch)
        if self.streak.failed(exc):
            raise self.repeated(text)
        raise TrialFailed(text)

    def known(self, record: TrialRecord, text: str) -> None:
        """A trial stopped as unsupported repeats the error its combination raised before: counted as that
        failure, and the run stops once it repeats `limit` times (the trial is then stored as failing with it)."""
        if self.streak.saw(text):
            self.record(record, text, 0)
            raise self.repeated(text) from None

    def reset(self) -> None:
        """A trial trained and reported its objectives: the streak of failures is over."""
        self.streak.reset()

    def repeated(self, text: str) -> RepeatedFailure:
        return RepeatedFailure(f"{self.name}: {self.streak.count} trials in a row failed with {text}; stopped the "
                               "run (finished trials are kept)")


__all__ = ["CATCH", "RUN_ENDED", "FailureStreak", "Failures", "FatalDeviceError", "RepeatedFailure", "RunEnded",
           "TrialFailed", "quiet_failures", "stop"]
