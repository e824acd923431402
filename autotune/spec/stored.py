"""What a study stores: of each trial, `TrialRecord`, the third catalogue beside the settings (settings.py) and the
metrics (spec/metrics.py); of itself, `StudyRecord`. Every user attr autotune writes is a field of one of them,
stored under the field's name; a trial's measured metrics are each stored under their own name (`metrics`), and
the speed probe's readings each under `probe:<key>` (`probes`). Nothing else reads or writes user attrs by name.

The objective fills a trial's record and study/records.py writes it, in the transaction that ends the trial;
`TrialRecord.of(trial)` reads it back for the summaries, the report, `best` and its export, the progress lines,
MLflow, the budget, the workers, warm starts and the pruners. optuna-dashboard shows the same attrs. A study's
record is written as the study learns it (`StudyRecord.write`: its config when it is created, a probe reading, the
strategy's plan, MLflow's parent run) and read by `StudyRecord.of(study)`.

They live here, below search/ and speed/, because the pruners and the sampler's view of stopped trials (search/)
read trial records, and the speed probe and the strategy (speed/) write the study's. A record stored by an
earlier release reads the same (tests/test_stored_studies.py); a trial's key this catalogue does not know is a
metric if it holds a number (or a flag), and left out otherwise, as is a study's (a user attr of someone else's).
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass, field
from typing import Any, TypeGuard


def _number(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def attr(doc: str) -> Any:
    """A stored field: None (not stored) until set; `doc` says what it holds (the reference page shows it)."""
    return field(default=None, metadata={"doc": doc})


@dataclass
class TrialRecord:
    """One trial as stored. A field left None is not stored (an attr the trial never set); `attrs()` is the stored
    form, `TrialRecord.of(trial)` reads it back. While a trial runs, the objective's stages fill one in memory."""

    # --- what it was asked to train
    seed: int | None = attr("the training seed: `best --export` writes it as `study.trial_seed`")
    settings: dict[str, Any] | None = attr("the point sampled: trainer settings, `model.KEY`, `user.NAME` (less any "
                                             "that shaped nothing)")
    device: str | None = attr("the device's name; a CPU's with the torch threads it trained on")
    precision: str | None = attr("its precision setting")
    warm_start: str | None = attr("`STUDY#NUMBER`: the earlier study's trial it was queued from (a warm start)")
    worker: str | None = attr("`host:pid:start` of the process that runs it (a dead one's trials are failed)")
    # --- how it trained
    probe: dict[str, Any] | None = attr("its combination's speed-probe reading: samples_per_s, compile_time_s, "
                                          "source, contended")
    history: list[dict[str, Any]] | None = attr("per epoch: the epoch, its clocks and the metrics reported")
    epoch_values: list[list[float]] | None = attr("per epoch: the objectives' values known then (NaN: not reported)")
    metrics: dict[str, Any] = field(default_factory=dict, metadata={
        "doc": "the final metrics (numbers; compression's `pruned_shrunk` a flag), each stored under its own name"})
    epochs_run: int | None = attr("epochs it trained")
    meters: dict[str, str] | None = attr("what measured peak_memory_mb and energy_j, or why they are absent")
    not_applied: dict[str, str] | None = attr("searched settings that shaped nothing here, and why")
    effective_lrs: list[float] | None = attr("the rates it trained at: a searched lr times its own optimizer's "
                                               "group lrs...")
    own_group_lrs: list[float] | None = attr("...which were these")
    recipe: dict[str, Any] | None = attr("settings it left to the user's code or the framework's defaults, with what "
                                         "they held")
    cpu_threads_capped: int | None = attr("the torch threads cap after an oversubscribed trial, where it applied")
    cpu_threads_used: int | None = attr("torch threads autotune chose (a cap, one less per DataLoader worker): "
                                          "`best --export` writes them as `cpu_threads`")
    oversubscribed: dict[str, Any] | None = attr("its threads waited for cores: the ratio, the wait, the load")
    oom_retried: bool | None = attr("it ran out of memory and was retried at half the batch sizes...")
    batch_size_used: int | None = attr("...training at this batch size")
    pruning_off: str | None = attr("why the study's per-epoch pruner could not judge it")
    # --- how it ended, where not with its values
    stop_reason: str | None = attr("why it stopped early: slow, diverged, oom, dominated, unsupported... "
                                     "(`early_stopped`: a complete trial; `surplus`, `orphaned`, `error`)")
    stop_epoch: int | None = attr("the epoch it stopped after (0: before it trained)")
    stop_detail: str | None = attr("the stop's detail: the rule, the figures it compared")
    error: str | None = attr("a failed trial's one line: its type, message and place in the user's code")
    surplus: bool | None = attr("it lost the race for the study's last slots and never ran")

    def attrs(self) -> dict[str, Any]:
        """The user attrs this record stores: each field set under its name, each metric under its own."""
        out: dict[str, Any] = {}
        for name in FIELDS:
            if name == "metrics":
                out.update({k: v for k, v in self.metrics.items() if k not in KEYS})
            elif (value := getattr(self, name)) is not None:
                out[name] = value
        return out

    @classmethod
    def of(cls, trial: Any) -> TrialRecord:
        """The record a trial stored (an Optuna FrozenTrial or Trial: anything with `user_attrs`). A finished
        trial's is read once per trial object (the pruners read every finished trial at every epoch)."""
        cached = _CACHE.get(id(trial))
        if cached is not None and cached[0]() is trial:
            return cached[1]
        record = cls._read(trial.user_attrs)
        state = getattr(trial, "state", None)
        if state is not None and state.is_finished():  # (its attrs can no longer change)
            key = id(trial)

            def forget(_: object, key: int = key) -> None:
                _CACHE.pop(key, None)
            _CACHE[key] = (weakref.ref(trial, forget), record)
        return record

    @classmethod
    def _read(cls, attrs: dict[str, Any]) -> TrialRecord:
        record = cls()
        fields = record.__dict__
        for k, v in attrs.items():
            if k in KEYS:
                fields[k] = v
            elif isinstance(v, (int, float)):  # (a bool too: compression's pruned_shrunk)
                record.metrics[k] = v
        return record

    def metric(self, name: str) -> float | None:
        """A final metric's value, if the trial stored a number for it (a flag is not one)."""
        v = self.metrics.get(name)
        return float(v) if _number(v) else None

    def stopped(self, reason: str, epoch: int, detail: str | None = None, error: str | None = None) -> None:
        """Record how the trial stopped (`detail` and `error` where given)."""
        self.stop_reason, self.stop_epoch = reason, epoch
        if detail is not None:
            self.stop_detail = detail
        if error is not None:
            self.error = error


PROBE_PREFIX = "probe:"  # a study's speed-probe readings: one user attr each, `probe:<hash>` (speed/probe.py)


@dataclass
class StudyRecord:
    """A study as autotune stores it of itself (its user attrs). A field left None is not stored."""

    config: dict[str, Any] | None = attr("the resolved config it was created with (passwords hidden)")
    source: str | None = attr("the run file's path")
    versions: dict[str, str] | None = attr("autotune, torch, optuna and Python that created it")
    device: str | None = attr("the device its trials train on")
    metrics: list[str] | None = attr("its objectives' metrics, in order")
    torch_threads: int | None = attr("torch's threads in the process that created it")
    warm_start: dict[str, Any] | None = attr("the earlier study it started from: its queued trials, the notes")
    strategy_plan: dict[str, Any] | None = attr("`probe_then_tune`'s plan: the kept combinations, the dropped")
    mlflow_run_id: str | None = attr("the MLflow parent run of its trials' runs")
    probes: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={
        "doc": "the speed probe's readings, each stored as `probe:<hash of combination, device, torch>`"})

    def attrs(self) -> dict[str, Any]:
        """The user attrs this record stores: each field set under its name, each probe reading under its key."""
        out = {name: value for name in STUDY_KEYS if (value := getattr(self, name)) is not None}
        out.update(self.probes)
        return out

    @classmethod
    def of(cls, study: Any) -> StudyRecord:
        """The record a study stored (an `optuna.Study` or a `StudySummary`: anything with `user_attrs`; a Study's
        are read from its storage, once)."""
        record = cls()
        for k, v in study.user_attrs.items():
            if k in STUDY_KEYS:
                record.__dict__[k] = v
            elif k.startswith(PROBE_PREFIX) and isinstance(v, dict):
                record.probes[k] = v
        return record


FIELDS = tuple(f.name for f in dataclasses.fields(TrialRecord))
STUDY_KEYS = frozenset(f.name for f in dataclasses.fields(StudyRecord)) - {"probes"}
KEYS = frozenset(FIELDS) - {"metrics"}  # the stored keys that are fields (any other stored key is a metric's)
# id(trial object) -> (a weak reference to it, its record), for finished trials; an entry leaves with its trial
_CACHE: dict[int, tuple[weakref.ref[Any], TrialRecord]] = {}

__all__ = ["FIELDS", "KEYS", "PROBE_PREFIX", "STUDY_KEYS", "StudyRecord", "TrialRecord"]
