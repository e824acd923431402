"""Sampler and pruner (from samplers.py, pruners.py); checks before a study exists; create or resume the study;
run it (returning the `optuna.Study`: observe's `TuneResult` reads it). The storage itself is storage.py's. Nothing
here knows MLflow: a tracker reaches a run as a callback its caller passes in (a `RunCallback`, observe's)."""

from __future__ import annotations

import math
import platform
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import check_one_device
from autotune.core import ConfigError, __version__, check_fit_signature, file_stem, lifetime, redact, watchdog
from autotune.fit import Fit, fit_name
from autotune.fit import notes as preflight_notes
from autotune.fit import preflight as preflight  # (workers and local_workers call it as runner's)
from autotune.search import pruners, results, samplers, space
from autotune.spec import RunConfig, StudyRecord
from autotune.study import orphans, records, warm
from autotune.study import storage as storage_mod
from autotune.study.budget import is_surplus
from autotune.study.objective import Objective, watching
from autotune.study.outcome import CATCH, quiet_failures
from autotune.training import accel

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


# ---------------------------------------------------------------- checks before a study exists


def validate(cfg: RunConfig) -> None:
    """What `autotune validate` checks in this layer: preflight, the storage and a warm start's source (the
    tracking server is checked where its callback is built, above)."""
    preflight(cfg)
    storage_mod.check_storage(cfg)
    check_existing(cfg)
    warm.source(cfg)


def versions() -> dict[str, str]:
    return {"autotune": __version__, "torch": __import__("torch").__version__, "optuna": optuna.__version__,
            "python": platform.python_version()}


# ---------------------------------------------------------------- running


def version_notes(study: optuna.Study) -> list[str]:
    """Differences between the study's recorded versions and this process's (results may not compare)."""
    stored = StudyRecord.of(study).versions or {}
    here = versions()
    return [f"{k} {stored[k]} in the study, {here[k]} here" for k in ("autotune", "torch", "optuna")
            if k in stored and stored[k] != here.get(k)]


def stored_metrics(summary: optuna.study.StudySummary) -> list[str] | None:
    """The objectives' metrics a study stores, in order: its `metrics` user attr, else its stored config's
    objectives (None: neither, a study not made by autotune, or by one that kept neither)."""
    stored = StudyRecord.of(summary)
    if isinstance(stored.metrics, list):
        return [str(m) for m in stored.metrics]
    objectives = stored.config.get("objectives") if isinstance(stored.config, dict) else None
    if isinstance(objectives, list) and all(isinstance(o, dict) and "metric" in o for o in objectives):
        return [str(o["metric"]) for o in objectives]
    return None


def check_same_objectives(cfg: RunConfig, summary: optuna.study.StudySummary) -> None:
    """A study resumed with other objectives would store one metric's values where it keeps another's (a front
    of accuracy against val_loss read as accuracy against time): the metrics, their order and directions must be
    the study's. Nothing is written before this passes."""
    dirs = [d.name.lower() for d in summary.directions]
    metrics = stored_metrics(summary)
    here = [o.metric for o in cfg.objectives]
    if dirs == cfg.directions and metrics in (None, here):
        return
    theirs = [f"{m} ({d})" for m, d in zip(metrics or ["?"] * len(dirs), dirs)]
    ours = [f"{m} ({d})" for m, d in zip(here, cfg.directions)]
    raise ConfigError(cfg.file, "objectives", f"study {cfg.study.name!r} in {redact(cfg.study.storage)} has "
                                                f"objectives [{', '.join(theirs)}], this config [{', '.join(ours)}]"
                                                "; its trials would be compared on other metrics: use --fresh or "
                                                "another study.name")


def check_existing(cfg: RunConfig) -> None:
    """`autotune validate`: what `run` would refuse about the study already in the storage (other objectives),
    without creating the storage, the study or anything in it."""
    url = cfg.study.storage
    for prefix in ("sqlite:///", "journal://"):
        if url.startswith(prefix) and not Path(url[len(prefix):]).is_file():
            return  # nothing stored yet
    storage = storage_mod.make_storage(cfg)
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        if summary.study_name == cfg.study.name:
            check_same_objectives(cfg, summary)


def open_study(cfg: RunConfig, fresh: bool = False, create: bool = True,
               device_name: str | None = None, read_only: bool = False) -> optuna.Study:
    """`device_name`: the device's name when already known (a `--workers` driver asks a child: never CUDA itself).
    `read_only` (report, best): an existing study, loaded without writing anything (read-only media)."""
    storage = storage_mod.make_storage(cfg, read_only=read_only, create=create or not read_only)
    name = cfg.study.name
    if fresh:
        try:
            optuna.delete_study(study_name=name, storage=storage)
        except KeyError:
            pass
    existing = {s.study_name: s for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    if name in existing:
        check_same_objectives(cfg, existing[name])
    elif not create or read_only:
        raise ConfigError(cfg.file, "study.name", f"no study {name!r} in {redact(cfg.study.storage)}; known: "
                                                    f"{', '.join(sorted(existing)) or 'none'}")
    if read_only:  # (create_study would try to insert the study first)
        return optuna.load_study(study_name=name, storage=storage, sampler=samplers.make_sampler(cfg),
                                 pruner=pruners.optuna_pruner(cfg))
    earlier = warm.source(cfg) if name not in existing else None  # checked before anything is written
    study = optuna.create_study(
        study_name=name, storage=storage, sampler=samplers.make_sampler(cfg), pruner=pruners.optuna_pruner(cfg),
        directions=cfg.directions, load_if_exists=True,
    )
    if name in existing and create and stored_metrics(existing[name]) is None:
        records.write_study(study, StudyRecord(metrics=[o.metric for o in cfg.objectives]))  # made without: from now on
    if name not in existing:
        import torch

        records.write_study(study, StudyRecord(
            config=storage_mod.stored_config(cfg), source=redact(cfg.source), versions=versions(),
            device=device_name or device_label(cfg), metrics=[o.metric for o in cfg.objectives]))
        with warnings.catch_warnings():  # experimental in Optuna, and stable enough for a label
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([o.metric for o in cfg.objectives])  # optuna-dashboard labels axes with them
        records.write_study(study, StudyRecord(torch_threads=torch.get_num_threads()))
        if earlier is not None:  # a new study starts from the earlier one's best configurations
            for line in warm.enqueue(study, cfg, earlier):
                print(f"note: {line}", file=sys.stderr, flush=True)
    return study


def device_label(cfg: RunConfig) -> str:
    """The study's device as its trials use it: a CPU with the fixed `cpu_threads` ('threads searched' when the
    space searches them; this process's threads when 0, torch's default)."""
    threads: int | str | None = "threads searched" if "cpu_threads" in cfg.space else \
        int(cfg.fixed().get("cpu_threads") or 0) or None
    return accel.device_name(accel.resolve_device(cfg.fixed()["device"]), threads)


def retrain_best(cfg: RunConfig, study: optuna.Study, best: results.TrialSummary, path: Path) -> Path:
    """Retrain a trial's settings (same seed) and save the dense fp32 state dict.

    Compression is switched off for the retrain: the file is the trained model itself, the warm
    start that `model.checkpoint` (or a distillation teacher) loads into the config's architecture.
    """
    import torch

    from autotune.fit import train

    settings = space.of_trial(cfg, best.settings, best.params)
    # what the trial chose (searched or fixed): a default given as a param would count as the user's choice
    chosen = {k: v for k, v in settings.items() if k in cfg.space or k in cfg.train}
    chosen.update(prune_method="none", prune_amount=0.0, finetune_epochs=0, quantize="none", qat=False)
    seed = best.seed
    result = train(cfg.model_copy(update={"distill": None}), params=chosen, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    assert result.model is not None  # (train keeps the model unless told not to)
    torch.save(result.model.state_dict(), tmp)
    tmp.replace(path)  # never a half-written checkpoint, even with several workers
    return path


def resolve_teacher(cfg: RunConfig, storage: optuna.storages.BaseStorage | None = None) -> RunConfig:
    """`distill: {teacher: best}`: the recommended trial of `teacher_study` (default: this study),
    retrained once and saved as studies/<study>-teacher.pt; later runs and workers reuse the file.
    Runs before this study is created, so a missing teacher leaves nothing behind."""
    d = cfg.distill
    if d is None or d.teacher != "best":
        return cfg
    name = d.teacher_study or cfg.study.name
    path = Path("studies") / f"{file_stem(name)}-teacher.pt"  # (a stored name never picks where a file goes)
    storage = storage or storage_mod.make_storage(cfg)
    try:
        src = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        src = None
    teacher_cfg = cfg.model_copy(update={"distill": None})
    stored = StudyRecord.of(src).config if src is not None else None
    if stored is not None and name != cfg.study.name:
        from autotune.config import from_dict

        teacher_cfg = from_dict({**stored, "distill": None}, source=cfg.source)
    if not path.is_file():
        best = results.best_summary(src, teacher_cfg) if src is not None else None
        if best is None:
            raise ConfigError(cfg.file, "distill.teacher", f"best needs a completed trial in study {name!r} in "
                                                             f"{redact(cfg.study.storage)}; run it without distill "
                                                             "first, or give a state-dict path")
        assert src is not None
        retrain_best(teacher_cfg, src, best, path)
    if d.teacher_model is None and teacher_cfg.model != cfg.model:
        d = d.model_copy(update={"teacher_model": teacher_cfg.model})
    return cfg.model_copy(update={"distill": d.model_copy(update={"teacher": str(path.resolve())})})


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def note_orphans(numbers: list[int], on_note: Callable[[str], None] | None = None) -> None:
    if numbers:
        text = (f"{len(numbers)} trial(s) left RUNNING by a process that is gone marked FAIL (orphaned) and "
                f"queued for one retry each: {', '.join(map(str, numbers))}")
        (on_note or _stderr)(text)


def n_finished(study: optuna.Study) -> int:
    """Finished trials (a surplus one, a lost race that never ran, is not one)."""
    return sum(1 for t in study.get_trials(deepcopy=False, states=FINISHED) if not is_surplus(t))


TrialCallback = Callable[[optuna.Study, FrozenTrial], None]


@runtime_checkable
class RunCallback(Protocol):
    """A trial callback (Optuna's `callbacks=[fn(study, trial)]` shape) that also hears when a run starts and ends:
    MLflow's tracker (observe) opens its parent run in `start` and ends it in `finish`. `status` is how this
    process's run ended (FINISHED, FAILED, KILLED), or None when the study goes on without it (a worker leaves)."""

    def start(self, study: optuna.Study) -> None: ...

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None: ...

    def finish(self, study: optuna.Study, status: str | None = "FINISHED") -> None: ...


def start_run(callbacks: list[TrialCallback] | None, study: optuna.Study) -> list[RunCallback]:
    """Start the callbacks that have a start and an end; returns them, for `finish_run`."""
    hooks = [cb for cb in callbacks or [] if isinstance(cb, RunCallback)]
    for hook in hooks:
        hook.start(study)
    return hooks


def finish_run(hooks: list[RunCallback], study: optuna.Study, status: str | None) -> None:
    for hook in hooks:
        hook.finish(study, status)


class FinishedBudget:
    """The objective that stops the study once it holds `n_trials` finished trials (Optuna's MaxTrialsCallback,
    without being a callback: for callbacks Optuna reads every trial back from the storage after it ends, a
    full read per trial on an RDB storage, about a tenth of plain ask/tell's cost on PostgreSQL). This process
    counts the trials its objective finishes (returned values Optuna takes, or pruned), and reads the study's own
    count again when that count reaches `n_trials` and every `refresh_s` seconds, when other processes may have
    added some."""

    def __init__(self, inner: Callable[[optuna.Trial], Any], n_trials: int, study: optuna.Study,
                 refresh_s: float = 10.0) -> None:
        import time

        self.inner = inner
        self.n_trials = n_trials
        self.refresh_s = refresh_s
        self._clock = time.monotonic
        self.finished = n_finished(study)
        self._read_at = self._clock()

    def __call__(self, trial: optuna.Trial) -> Any:
        try:
            out = self.inner(trial)
        except optuna.TrialPruned:
            self._finished(trial.study)
            raise
        values = list(out) if isinstance(out, (list, tuple)) else [out]
        try:  # Optuna's own test (_tell._check_values_are_feasible): else it fails the trial
            told = len(values) == len(trial.study.directions) and not any(math.isnan(float(v)) for v in values)
        except (TypeError, ValueError):
            told = False
        if told:
            self._finished(trial.study)
        return out

    def _finished(self, study: optuna.Study) -> None:
        """One more trial finished (this one: the storage holds it as RUNNING until Optuna tells its end)."""
        self.finished += 1
        if self.finished >= self.n_trials or self._clock() - self._read_at > self.refresh_s:
            self.finished = n_finished(study) + 1
            self._read_at = self._clock()
        if self.finished >= self.n_trials:
            study.stop()  # takes effect once this trial is told: no trial beyond the budget is asked for


def run(cfg: RunConfig, fresh: bool = False, callbacks: list[TrialCallback] | None = None,
        on_start: Callable[[optuna.Study, int], None] | None = None, fit: Fit | None = None,
        on_note: Callable[[str], None] | None = None, cancel: threading.Event | None = None) -> optuna.Study:
    """Create or resume the study and run trials until it holds `n_trials` finished ones (or timeout); returns it
    (observe's `TuneResult` reads it).
    `fit`: a training function (default: the config's `trainer:`, else the built-in trainer). `callbacks`: Optuna
    trial callbacks; a `RunCallback` among them (MLflow's tracker) also starts once the study is open and finishes
    with the run.

    Trials left RUNNING by a run that died (SIGKILL, OOM killer, power) are failed as `orphaned` and
    retried once first; `on_note` (default: stderr) hears how many. `cancel`: an event that stops the run when set
    (from any thread): the trial it is on is recorded interrupted and the study returned. A storage that fails under
    the run (a full disk, a database server gone) is a StorageFault (one line; the trials finished before it are
    kept).
    """
    if cancel is not None and not isinstance(cancel, threading.Event):
        raise TypeError(f"cancel: a threading.Event (set it to stop the run); got {type(cancel).__name__}")
    with storage_mod.faults_named(cfg):
        return _run(cfg, fresh, callbacks, on_start, fit, on_note, cancel)


def _run(cfg: RunConfig, fresh: bool, callbacks: list[TrialCallback] | None,
         on_start: Callable[[optuna.Study, int], None] | None, fit: Fit | None,
         on_note: Callable[[str], None] | None, cancel: threading.Event | None) -> optuna.Study:
    if fit is not None:
        check_fit_signature(fit, fit_name(cfg, fit), cfg.file)
        check_one_device(cfg, fit, cfg.file)
    preflight(cfg)
    cfg = resolve_teacher(cfg)
    study = open_study(cfg, fresh=fresh)
    for note in preflight_notes(cfg):
        (on_note or _stderr)(f"note: {note}")
    note_orphans(orphans.reap(study), on_note)
    hooks = start_run(callbacks, study)
    # Everything imported so far (torch, optuna, sympy...) lives for the whole run: frozen out of the garbage
    # collector for the run (accel.frozen_survivors), so the collection before each trial scans only what trials
    # made (0.5 s per collection otherwise, longer than a digits trial trains). No full collection first: it took
    # as long in a host with many objects, and garbage frozen here is collectable again once the run ends.
    todo = None
    if cfg.study.n_trials is not None:
        todo = max(0, cfg.study.n_trials - n_finished(study))
    if on_start is not None:
        on_start(study, todo if todo is not None else -1)
    status = "FAILED"  # how the parent run ends if the study does not
    resend: watchdog.Terminated | None = None
    try:
        if todo != 0:
            objective: Callable[[optuna.Trial], Any] = Objective(cfg, fit)
            if cfg.study.n_trials is not None:
                objective = FinishedBudget(objective, cfg.study.n_trials, study)
            with quiet_failures(), accel.frozen_survivors(), watching(objective, cfg.study.timeout, study, cancel):
                # callbacks=None without the caller's: Optuna then reads no trial back for them (see FinishedBudget)
                study.optimize(objective, n_trials=todo, timeout=cfg.study.timeout, callbacks=callbacks or None,
                               catch=CATCH, gc_after_trial=False)  # the objective releases memory itself
        status = "FINISHED"
    except watchdog.Terminated as e:
        status, resend = "KILLED", e
        raise
    except (KeyboardInterrupt, SystemExit):  # (SystemExit: the host's own handler's exit, passed through)
        status = "KILLED"
        raise
    finally:
        finish_run(hooks, study, status)
        if resend is not None and not lifetime.is_program():
            resend.resend()  # the host kept SIGTERM's default: it ends as SIGTERM ends it, now that all is recorded
    return study
