"""The Optuna study: create or resume it in its storage, run trials (`Objective`: one training per trial, its values
and records), several workers, orphaned trials, the budget; `TuneResult`.

The names below are imported on first use (core/_lazy.py): importing one module of this package never
imports the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core._lazy import exports

if TYPE_CHECKING:
    from autotune.study._objective import CATCH, FatalDeviceError, Objective, RepeatedFailure, TrialFailed
    from autotune.study._storage import bare_config, check_storage, make_storage
    from autotune.study._study import TuneResult, open_study, resolve_teacher, retrain_best, run, validate
    from autotune.study._workers import run_parallel, run_worker

_NAMES = {
    "TuneResult": "_study",
    "open_study": "_study",
    "resolve_teacher": "_study",
    "retrain_best": "_study",
    "run": "_study",
    "validate": "_study",
    "CATCH": "_objective",
    "FatalDeviceError": "_objective",
    "Objective": "_objective",
    "RepeatedFailure": "_objective",
    "TrialFailed": "_objective",
    "bare_config": "_storage",
    "check_storage": "_storage",
    "make_storage": "_storage",
    "run_parallel": "_workers",
    "run_worker": "_workers",
}
__getattr__ = exports(__name__, _NAMES)
__all__ = ["CATCH", "FatalDeviceError", "Objective", "RepeatedFailure", "TrialFailed", "TuneResult", "bare_config",
           "check_storage", "make_storage", "open_study", "resolve_teacher", "retrain_best", "run", "run_parallel",
           "run_worker", "validate"]
