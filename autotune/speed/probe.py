"""The speed probe in a study: what each combination of throughput settings trains at, kept in the study and
used before a trial trains.

A trial's throughput (samples/s) depends on its acceleration settings, batch size, model and input shape,
not on its learning rate, weight decay or schedule. `combination(plan)` is that part of a trial's point:
the settings in `THROUGHPUT`, every `model.*` key, and every `user.*` parameter (a user's training function
may build its model from them; autotune cannot tell which do). Each combination measured on a device is one
study user attr, `probe:<hash of combination, device and torch version>`, so every worker and a resumed run
reuse it, and a study moved to another machine measures afresh.

A trial's probe is opened once (`Gate.open`; its combination's record is read at its first use). Before the trial trains
(`TrialProbe.check`), what the study knows about its combination decides:
- it failed before because of its settings (see below): the trial is stopped at once, `stop_reason:
  unsupported`, with that error;
- its samples/s are known: the projected training time, epochs x samples per epoch / samples/s (+ compile),
  is checked against `max_trial_seconds` and `vs_front` (the slowest Pareto trial x the factor): too slow
  stops it before its first epoch (`stop_reason: slow`, `stop_epoch: 0`).
Otherwise the trial measures itself (`TrialProbe.window`): its first steps after warm-up are timed
(throughput.ProbeWindow), the measurement is stored, and the same projection may stop it right there
(still `stop_epoch: 0`). A measurement taken while this process waited for cores (`contention.contended`: other
busy processes held them) is stored with `contended: true` and decides nothing (`usable`): no projection, no
vs_front, no oversubscription ratio, no strategy plan rests on it, and the next trial with that combination
measures again (its reading replaces it). A decision's message names the reading it rests on (`reading`:
"speed probe: trial 3, uncontended"). A probe costs two device synchronizations and one study write per combination,
and a stopped trial saves the rest of its first epoch (and later trials of that combination all of theirs).

Which failures mark a combination unsupported (`blame`): a wrong "unsupported" poisons every later trial
with that combination, in this run and every resumed one, while a missed one only costs a trial that fails
again; so the rule is narrow. A failure is the combination's only when all of these hold:
- it came before the combination was measured (no trial with it got through its timed steps here);
- the innermost frame of its traceback is not in the user's code (autotune, torch, an installed package);
- it is attributable to a setting of the combination: raised through torch's compiler (dynamo, inductor,
  AOT autograd, triton) with `compile` on; a kernel missing for the trial's fp16/bf16 (`... not implemented
  for 'Half'`); or raised inside autotune's own application of a setting (accel.py: compile, autocast,
  the grad scaler, backend flags).
Anything else is the trial's own failure (FAIL, with its text) and the next trial with the same combination
runs again: the user's code raising (a KeyError, a transient OSError while reading data, a shape bug in
the loss), whatever the settings. The record also keeps `code`, a fingerprint of the user's training
function's file: a record written for other code (the user fixed a bug that surfaced through the compiler),
or by an older autotune that recorded any early failure (no `blame`), is not trusted and the combination
is measured afresh.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
import os
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import optuna
import torch

from autotune.core import TrialStopped, describe_exception, library_file
from autotune.fit import TrialPlan
from autotune.spec import MODEL_PREFIX, PROBE_PREFIX, USER_PREFIX, RunConfig, StudyRecord, TrialRecord, acting
from autotune.training import Measurement, ProbeWindow, TrainResult, accel

# Trainer settings that set how fast a step runs: the catalogue's `acts` speed or speed_and_result (optimizer,
# accumulation and clipping change a step's cost by a little and act as `result`: more trials share a
# measurement). The model and input shape are the study's.
THROUGHPUT = acting("speed", "speed_and_result")
ATTR_PREFIX = PROBE_PREFIX  # a reading's study user attr: StudyRecord.probes


def combination(plan: TrialPlan) -> dict[str, Any]:
    """The part of a trial's settings that sets its throughput: the throughput settings, the architecture's
    `model.` keys and the user's parameters (as `user.NAME`)."""
    s = plan.settings
    out = {k: s[k] for k in THROUGHPUT}
    out.update({k: v for k, v in s.items() if k.startswith(MODEL_PREFIX)})
    out.update({USER_PREFIX + k: v for k, v in plan.training.user.items()})
    return out


def key(combo: Mapping[str, Any], device: str, torch_version: str = torch.__version__) -> str:
    """The study user attr that holds this combination's measurement on this device and torch."""
    blob = json.dumps({"combination": combo, "device": device, "torch": torch_version}, sort_keys=True, default=str)
    return ATTR_PREFIX + hashlib.sha1(blob.encode()).hexdigest()[:16]


def device_name(plan: TrialPlan) -> str:
    """The plan's device as the probe records key it (a CPU's includes this process's thread count: throughput
    depends on it)."""
    return accel.device_name(plan.device)


def describe(combo: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in combo.items() if k != "device")


REREAD_S = 5.0  # a miss reads the study's records again at most this often (another worker may have measured)


WriteStudy = Callable[[optuna.Study, StudyRecord], None]  # stores a study record (study/records.py's write_study)


class Cache:
    """The study's probe records, read from its user attrs on a miss (another worker may have measured it), and
    stored there by `write`."""

    def __init__(self, study: optuna.Study | None, write: WriteStudy) -> None:
        self.study = study
        self.write = write
        self.records: dict[str, dict[str, Any]] = {}
        self._read_at = -math.inf

    def get(self, k: str) -> dict[str, Any] | None:
        stale = k not in self.records or self.records[k].get("contended")  # another worker may have re-measured
        if stale and self.study is not None and time.monotonic() - self._read_at >= REREAD_S:
            self._read_at = time.monotonic()
            self.records.update(StudyRecord.of(self.study).probes)
        return self.records.get(k)

    def put(self, k: str, record: dict[str, Any]) -> None:
        self.records[k] = record
        if self.study is not None:
            self.write(self.study, StudyRecord(probes={k: record}))


def record(combo: Mapping[str, Any], device: str, measurement: Measurement | None = None, error: str | None = None,
           source: str = "", blame: str | None = None, code: str | None = None,
           contended: bool | None = None) -> dict[str, Any]:
    """A study's probe record: the combination, where it ran, and its measurement (with `contended`: whether this
    process waited for cores while it was taken) or its error (with the setting it is blamed on and the
    fingerprint of the code it ran: an error is trusted only with both, see `trusted`)."""
    out: dict[str, Any] = {"combination": dict(combo), "device": device, "torch": torch.__version__, "source": source}
    if measurement is not None:  # unknowns (NaN) are stored as null
        out.update({k: v if not (isinstance(v, float) and not math.isfinite(v)) else None
                    for k, v in measurement.as_dict().items()})
        if contended is not None:
            out["contended"] = contended
    if error is not None:
        out["error"] = error
        if blame is not None:
            out.update(blame=blame, code=code)
    return out


# torch's compiler stack: a failure raised through it, with compile on, is compile's
COMPILER_PATHS = ("/torch/_dynamo/", "/torch/_inductor/", "/torch/_functorch/", "/triton/")
# a device without a kernel for the trial's reduced precision (torch's words, lower-cased)
DTYPE_MARKERS = ("not implemented for 'half'", "not implemented for 'bfloat16'", "unsupported scalartype half",
                 "unsupported scalartype bfloat16")
_ACCEL_FILE = os.path.join(os.path.dirname(os.path.abspath(accel.__file__)), "accel.py")


# Raised by dynamo while tracing the user's own forward (a shape or dtype bug of theirs that the trace ran into,
# as eager mode would): the code's failure, not the compiler's
TRACED_USER_ERRORS = ("TorchRuntimeError", "UserError")


def blame(exc: BaseException, plan: TrialPlan) -> str | None:
    """The setting of the trial's combination this failure is attributable to, or None: the trial's own failure
    (the user's code, data, loss...). Needs the exception's traceback (call it before its frames are dropped).
    The rule is the module's doc; it errs towards None, which costs at most a trial that fails again."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or not library_file(frames[-1].filename):
        return None  # raised by the user's own code (or with no place to tell): theirs, whatever the settings
    files = [os.path.abspath(f.filename).replace(os.sep, "/") for f in frames]
    if plan.settings.compile and any(p in f for f in files for p in COMPILER_PATHS) \
            and type(exc).__name__ not in TRACED_USER_ERRORS:
        return "compile"
    text = str(exc).lower()
    if plan.settings.precision != "fp32" and any(m in text for m in DTYPE_MARKERS):
        return "precision"
    applied = [f.name for f in frames if os.path.abspath(f.filename) == _ACCEL_FILE]
    if applied:
        return f"accel.{applied[-1]}"  # autotune's own application of an acceleration setting
    return None


def code_fingerprint(fit: Any) -> str:
    """What the trial's code is, for an error record: a hash of the training function's file ('builtin': the
    built-in trainer, which autotune's version stands for; '' when the file cannot be read)."""
    if fit is None:
        from autotune.core import __version__

        return f"builtin {__version__}"
    try:
        path = inspect.getsourcefile(fit)
        with open(path or "", "rb") as f:
            return hashlib.sha1(f.read()).hexdigest()[:12]
    except (OSError, TypeError):
        return ""


def usable(rec: Mapping[str, Any] | None) -> bool:
    """A measurement a decision may rest on: samples/s taken while this process had its cores. A contended one
    (others held the cores: the machine's speed, not the combination's) steers nothing and is measured again."""
    return rec is not None and bool(rec.get("samples_per_s")) and not rec.get("contended")


def reading(rec: Mapping[str, Any]) -> str:
    """Which reading a decision was taken from, for its message: 'speed probe: trial 3, uncontended'."""
    how = "" if "contended" not in rec else ", contended" if rec["contended"] else ", uncontended"  # (older: unsaid)
    return f"speed probe: {rec.get('source') or 'unknown source'}{how}"


def time_at_reading_s(rec: Mapping[str, Any], plan: TrialPlan) -> float | None:
    """Training time of a trial with this plan at the recorded samples/s (None: the epoch's size is unknown):
    epochs x samples per epoch (at its data_fraction) / samples/s, plus compile unless time excludes it."""
    sps, full = rec.get("samples_per_s"), rec.get("epoch_samples")
    if not sps or not full:
        return None
    s = plan.settings
    compile_s = 0.0 if s.time_excludes_compile else float(rec.get("compile_time_s") or 0.0)
    return compile_s + int(s.epochs) * float(full) * float(s.data_fraction) / float(sps)


class Gate:
    """What the study's probes say about its trials (see the module's doc): one per run, opened once per trial
    (`open`)."""

    def __init__(self, cfg: RunConfig, fit: Any = None, *, write: WriteStudy) -> None:
        self.cfg = cfg
        self.write = write  # how a probe record is stored in the study
        self.code = code_fingerprint(fit)  # an error record is trusted only for the code it was written for
        self.caches: dict[int, Cache] = {}  # per study (one objective serves one study; tests reuse objectives)

    def _cache(self, trial: optuna.Trial) -> Cache:
        study = trial.study
        cache = self.caches.get(id(study))
        if cache is None or cache.study is not study:
            cache = self.caches[id(study)] = Cache(study, self.write)
        return cache

    def trusted(self, rec: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        return trusted(rec, self.code)

    def open(self, trial: optuna.Trial, plan: TrialPlan, trial_record: TrialRecord) -> TrialProbe:
        """The probe of one trial: what the study knows of its plan's combination, read once, here."""
        return TrialProbe(self, trial, plan, trial_record)


class TrialProbe:
    """The speed probe of one trial's plan, opened once (`Gate.open`): the study's record of its combination, read
    when it is opened, stops it before it trains (`check`) or leaves its first steps to be timed (`window`); what
    its run leaves is stored for the combination (`failed`, `finished`). The reading a decision rests on goes into
    the trial's record (`probe`)."""

    def __init__(self, gate: Gate, trial: optuna.Trial, plan: TrialPlan, trial_record: TrialRecord) -> None:
        self.gate, self.trial, self.plan, self.trial_record = gate, trial, plan, trial_record
        self.combo = combination(plan)
        self.device = device_name(plan)
        self.key = key(self.combo, self.device)
        self.cache = gate._cache(trial)
        self.timing: ProbeWindow | None = None  # the window timing this plan's first steps (`window`)

    @functools.cached_property
    def known(self) -> Mapping[str, Any] | None:
        """The study's record of the combination, read at its first use (None: unknown here, or an error not to be
        trusted)."""
        return self.gate.trusted(self.cache.get(self.key))

    def of(self, plan: TrialPlan) -> TrialProbe:
        """The same trial's probe for another plan (an out-of-memory retry's, at half the batch sizes: another
        combination)."""
        return TrialProbe(self.gate, self.trial, plan, self.trial_record)

    def check(self) -> None:
        """Stop the trial now if the study already knows its combination fails here or is too slow."""
        rec = self.known
        if rec is None or (not rec.get("error") and not usable(rec)):
            return  # unknown, or contended: this trial measures it again (`window`)
        self.trial_record.probe = _summary(rec)
        if rec.get("error"):
            raise TrialStopped("unsupported", 0, f"{describe(self.combo)} failed here before "
                                                 f"({rec.get('source')}): {rec['error']}")
        self.check_projection(rec)

    def known_error(self) -> str | None:
        """The error this trial's combination raised here before, if it did."""
        rec = self.known
        return str(rec["error"]) if rec is not None and rec.get("error") else None

    def check_projection(self, rec: Mapping[str, Any]) -> None:
        """`max_trial_seconds`, `vs_front` and `min_front_gain` on the projected training time, before the first
        epoch ends. A contended reading decides nothing (`usable`); the message names the reading it used."""
        proj = time_at_reading_s(rec, self.plan) if usable(rec) else None
        if proj is None:
            return
        cfg, study = self.gate.cfg, self.trial.study
        slow = cfg.pruning.slow
        at = f"{float(rec['samples_per_s']):,.0f} samples/s ({reading(rec)})"
        if slow.max_trial_seconds is not None and proj > slow.max_trial_seconds:
            raise TrialStopped("slow", 0, f"projected {proj:.1f}s at {at} > max_trial_seconds "
                                          f"{slow.max_trial_seconds:g}")
        if slow.vs_front is not None:
            from autotune.search import front_of

            times = [s for t in front_of(study, cfg) if (s := TrialRecord.of(t).metric("train_time_s")) is not None]
            if times and proj > slow.vs_front * max(times):
                raise TrialStopped("slow", 0, f"projected {proj:.1f}s at {at} > {slow.vs_front:g} x "
                                              f"slowest Pareto trial ({max(times):.1f}s)")
        if slow.min_front_gain is not None:  # its best case would barely move the front
            from autotune.search import check_front_gain_in

            check_front_gain_in(study, cfg, proj, at)

    def window(self) -> ProbeWindow | None:
        """A window that measures this plan's first steps when the study has no measurement of its combination, or
        only a contended one (which the new reading replaces, contended or not: the latest says most). None on
        several devices: a trial there is timed by its ranks' run, not in this process."""
        rec = self.known
        if (rec is not None and (rec.get("error") or usable(rec))) or int(self.plan.settings.devices) != 1:
            return None

        def measured(m: Measurement) -> None:
            # others held the cores while it timed: said, so no trial takes it as a reference and the next measures
            rec = record(self.combo, self.device, m, source=f"trial {self.plan.number}", contended=window.contended)
            self.cache.put(self.key, rec)
            self.trial_record.probe = _summary(rec)
            self.check_projection(rec)

        window = self.timing = ProbeWindow(on_measured=measured, compiled=bool(self.plan.settings.compile))
        return window

    def failed(self, exc: BaseException) -> str | None:
        """The trial raised. Before its combination was measured, and blamed on one of its settings (`blame`,
        called with the traceback still on `exc`): the combination fails here and later trials with it stop as
        unsupported, with this error. Returns the setting blamed (None: the trial's own failure, not recorded)."""
        if self.timing is None or self.timing.done:
            return None
        why = blame(exc, self.plan)
        if why is None:
            return None
        self.cache.put(self.key, record(self.combo, self.device, error=describe_exception(exc, limit=300),
                                        source=f"trial {self.plan.number}", blame=why, code=self.gate.code))
        return why

    def finished(self, result: TrainResult, contended: bool = False) -> None:
        """A trial too short for its window to finish: its own steady samples/s are the measurement (`contended`:
        its threads waited for cores over the run)."""
        if self.timing is None or self.timing.done or result.samples_per_s <= 0:
            return
        samples = sum(r.samples_per_s * r.epoch_time_s for r in result.history[:1])
        fraction = float(self.plan.settings.data_fraction)
        m = Measurement(samples_per_s=result.samples_per_s, steps_per_s=math.nan, timed_steps=0,
                        timed_s=result.train_time_s, first_step_s=math.nan, compile_time_s=result.compile_time_s,
                        epoch_samples=samples / fraction if samples > 0 else None, peak_memory_bytes=None)
        self.cache.put(self.key, record(self.combo, self.device, m, source=f"trial {self.plan.number} (whole run)",
                                        contended=contended))


def trusted(rec: Mapping[str, Any] | None, code: str) -> Mapping[str, Any] | None:
    """The record, unless it is an error not to be trusted: one not blamed on a setting (an older autotune
    recorded any early failure) or written for other code (`code_fingerprint`)."""
    if rec is not None and rec.get("error") and (not rec.get("blame") or rec.get("code") != code):
        return None
    return rec


def _summary(rec: Mapping[str, Any]) -> dict[str, Any]:
    """What a trial keeps of its combination's probe (`TrialRecord.probe`)."""
    out = {k: rec[k] for k in ("samples_per_s", "compile_time_s", "source", "error", "contended")
           if rec.get(k) is not None}
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}

__all__ = ["ATTR_PREFIX", "THROUGHPUT", "Cache", "Gate", "TrialProbe", "WriteStudy", "blame", "code_fingerprint",
           "combination", "key", "reading", "record", "time_at_reading_s", "usable"]
