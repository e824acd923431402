"""The Optuna study: create or resume it in its storage, run trials (`Objective`: one training per trial, its values
and records), several workers, orphaned trials, the budget. `run` and `run_parallel` return the `optuna.Study`
(observe's `TuneResult` reads it)."""

from __future__ import annotations

from autotune.study.budget import counts, is_surplus
from autotune.study.local_workers import run_parallel
from autotune.study.objective import Objective
from autotune.study.outcome import CATCH, FatalDeviceError, RepeatedFailure, TrialFailed
from autotune.study.records import write_study
from autotune.study.runner import open_study, resolve_teacher, retrain_best, run, validate
from autotune.study.storage import bare_config, check_storage, faults_named, make_storage
from autotune.study.workers import run_worker, visible_gpus

__all__ = [
    "CATCH", "FatalDeviceError", "Objective", "RepeatedFailure", "TrialFailed", "visible_gpus",
    "bare_config", "check_storage", "counts", "is_surplus", "make_storage", "open_study",
    "resolve_teacher", "retrain_best", "run", "run_parallel", "run_worker", "validate", "write_study",
    "faults_named",
]
