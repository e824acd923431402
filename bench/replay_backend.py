"""The replay backend: strategies run against a recorded workload on a simulated clock, with N simulated workers.

`SimClock` schedules N worker threads as a discrete-event simulation: each worker has its own simulated time,
and only the worker furthest behind runs (ties: the lower worker number); a worker that charges time
(`advance`) waits until every other worker has caught up with it. So the study's state that a worker sees when
its epoch ends (which trials finished, which probe readings exist) is the state at that simulated moment, as it
would be for real workers sharing one storage. Uncharged (`charge_cpu=False`), a replay with a seed gives the same
table every time; charged, the strategy's measured CPU time varies by milliseconds from run to run, which can
reorder close events between workers (two 8-worker runs of 20 seeds differed by up to 10 % in a median).

`replay_backend(workload, clock)` is an `autotune.fit.Backend`: the study's real objective (its sampler, speed
probe, stop rules, Pareto pruners and records) calls it instead of the trainer. It answers a plan from the
recording: set-up, then per epoch its training and evaluation time charged to the clock, the epoch's record to
the objective's callbacks (which may stop the trial), the speed probe's reading delivered after the probe's steps
of epoch 1. A recorded configuration that diverged stops at the same epoch for the same reason.

The strategy's own work is charged too (`charge_cpu`, on by default): the CPU time a worker's thread spends between
two charges, outside the surrogate's lookup, is added to its clock at the next charge. So a sampler that thinks
for 0.2 s before each trial of 2 s pays for it, as it would for real; the recording's times are CPU time of torch
on one thread (bench/replay_record.py), the same unit. autotune's arm keeps its study in a SQLite file as a real
run does (bench/replay_arms.run_autotune), so its storage reads and writes are in that CPU time; Syne Tune's
tuner loop and scheduler are charged in the same unit on its own simulated clock (bench/replay_syne.py: its time
keeper counts their thread CPU seconds instead of the wall seconds it counts as shipped).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import optuna

from autotune.core import TrialStopped
from autotune.fit import Backend
from autotune.spec import TrialRecord
from autotune.training import EpochRecord, Measurement, TrainResult
from autotune.training.throughput import MIN_SECONDS, TIMED_STEPS, WARMUP_STEPS
from bench.replay_workload import Curve, Workload


class BudgetSpent(BaseException):  # noqa: N818 (not an error: the worker's simulated budget ran out)
    """Raised in a worker whose simulated time passed the budget: its trial is cut off and the worker stops. A
    BaseException, so no `except Exception` in the strategy code takes it for the trial's own failure."""


class SimClock:
    """Simulated seconds per worker thread; only the worker furthest behind runs. With `charge_cpu`, each worker's
    own CPU time between charges (the strategy's work: sampling, pruning, records) is charged as well."""

    def __init__(self, workers: int, budget_s: float, charge_cpu: bool = True) -> None:
        self.budget_s = budget_s
        self.t = [0.0] * workers
        self.live = set(range(workers))
        self.charge_cpu = charge_cpu
        self.strategy_s = [0.0] * workers  # CPU seconds charged for the strategy's own work, per worker
        self._cond = threading.Condition()
        self._local = threading.local()

    @property
    def worker(self) -> int:
        return self._local.worker

    def now(self) -> float:
        return self.t[self.worker]

    def _turn(self) -> int:
        return min(self.live, key=lambda w: (self.t[w], w))

    def enter(self, worker: int) -> None:
        """The calling thread is `worker`: it waits for its turn."""
        self._local.worker = worker
        with self._cond:
            self._cond.wait_for(lambda: self._turn() == worker)
        self._mark()

    def _mark(self) -> None:
        self._local.mark = time.thread_time()
        self._local.free = 0.0

    @contextmanager
    def free(self) -> Iterator[None]:
        """Work inside is the simulator's own (the surrogate's lookup), never charged."""
        t0 = time.thread_time()
        try:
            yield
        finally:
            self._local.free += time.thread_time() - t0

    def advance(self, seconds: float) -> None:
        """Charge `seconds` (and, with `charge_cpu`, the worker's own CPU time since its last charge) to the calling
        worker and wait until it is the furthest behind again; past the budget, `BudgetSpent`."""
        w = self.worker
        own = max(0.0, time.thread_time() - self._local.mark - self._local.free) if self.charge_cpu else 0.0
        with self._cond:
            self.t[w] += max(0.0, float(seconds)) + own
            self.strategy_s[w] += own
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._turn() == w)
        self._mark()  # waiting for the other workers is theirs, not this worker's
        if self.t[w] > self.budget_s:
            raise BudgetSpent

    def leave(self) -> None:
        with self._cond:
            self.live.discard(self.worker)
            self._cond.notify_all()


def run_workers(clock: SimClock, work: Callable[[], None]) -> None:
    """`work()` in a loop on every worker thread until its simulated time passes the budget."""
    errors: list[BaseException] = []

    def loop(w: int) -> None:
        clock.enter(w)
        try:
            while clock.now() < clock.budget_s:
                work()
        except BudgetSpent:
            pass
        except BaseException as e:  # a bug in the harness: reported, not lost in a thread
            errors.append(e)
        finally:
            clock.leave()

    threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in range(1, len(clock.t))]
    for t in threads:
        t.start()
    loop(0)  # worker 0 in the calling thread (a profiler of the caller sees one worker's work)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# ---------------------------------------------------------------- replaying one trial


def point_of(workload: Workload, settings: Any) -> dict[str, Any]:
    """The recorded space's keys of a trial's settings (what the surrogate looks up)."""
    return {k: settings[k] for k in workload.keys if k in settings and settings[k] is not None}


def probe_reading(curve: Curve, batch_size: int) -> tuple[float, Measurement]:
    """(seconds into epoch 1 at which the speed probe's window closes, what it measured): its warm-up and timed
    steps (at least MIN_SECONDS of them) at the recorded first epoch's samples/s."""
    first = curve.epochs[0]
    sps = float(first["samples_per_s"])
    epoch_samples = sps * float(first["train_time_s"])
    steps = max(1.0, epoch_samples / max(batch_size, 1))
    share = min(1.0, (WARMUP_STEPS + TIMED_STEPS) / steps)
    at = max(share * curve.epoch_train_s(1), min(MIN_SECONDS, curve.epoch_train_s(1)))
    timed = TIMED_STEPS * batch_size / sps
    return at, Measurement(samples_per_s=sps, steps_per_s=sps / max(batch_size, 1), timed_steps=TIMED_STEPS,
                           timed_s=timed, first_step_s=batch_size / sps, compile_time_s=0.0,
                           epoch_samples=epoch_samples, peak_memory_bytes=None)


def record_of(curve: Curve, epoch: int, lr: float) -> EpochRecord:
    e = curve.epochs[epoch - 1]
    metrics = {k: float(e[k]) for k in ("val_accuracy", "val_loss") if k in e}
    return EpochRecord(epoch=epoch, train_loss=float(e.get("train_loss", math.nan)),
                       epoch_time_s=curve.epoch_train_s(epoch), train_time_s=float(e["train_time_s"]),
                       samples_per_s=float(e["samples_per_s"]), data_wait_fraction=0.0, lr=lr, metrics=metrics)


def replay_train(workload: Workload, clock: SimClock) -> Callable[..., TrainResult]:
    """The trainer's signature over the recording (see the module's doc)."""

    def train(plan: Any, fit: Any = None, *, probe: Any = None, on_epoch: Callable[[EpochRecord], None] | None = None,
              on_record: Callable[[EpochRecord], None] | None = None, keep_model: bool = True) -> TrainResult:
        s = plan.settings
        with clock.free():
            curve = workload.nearest(point_of(workload, s))
        epochs = int(s["epochs"])
        clock.advance(curve.setup_s)
        history: list[EpochRecord] = []
        for epoch in range(1, epochs + 1):
            if epoch > len(curve.epochs):  # the recorded configuration stopped here (diverged)
                stop = curve.stop or {"reason": "diverged", "detail": "the recording ends here"}
                raise TrialStopped(stop["reason"], epoch - 1, f"replayed: {stop.get('detail', '')}")
            spent = 0.0
            window = probe
            if epoch == 1 and window is not None and not window.done and window.on_measured is not None:
                at, m = probe_reading(curve, int(s["batch_size"]))
                clock.advance(at)
                spent = at
                window.measurement = m
                window.on_measured(m)  # the study's gate: may stop the trial (slow, behind the front)
            clock.advance(curve.epoch_s(epoch) - spent)
            rec = record_of(curve, epoch, float(s.get("lr", 0.0)))
            history.append(rec)
            if on_record is not None:
                on_record(rec)
            if on_epoch is not None:
                on_epoch(rec)
        last = history[-1]
        final = dict(last.metrics)
        return TrainResult(final=final, train_time_s=last.train_time_s, samples_per_s=last.samples_per_s,
                           compile_time_s=0.0, data_wait_fraction=0.0, epochs_run=len(history), device="cpu",
                           precision=str(s.get("precision", "fp32")), history=history)

    return train


def replay_backend(workload: Workload, clock: SimClock) -> Backend:
    return Backend(replay_train(workload, clock), real=False)


# ---------------------------------------------------------------- what a study's trials did, on the clock


@dataclass
class Log:
    """(simulated seconds, accuracy or None, training time or None, state name) per trial that ended in budget:
    the events bench/time_to_target.py's measures read."""

    events: list[tuple[float, float | None, float | None, str]] = field(default_factory=list)

    def callback(self, clock: SimClock, stopped: Callable[[optuna.trial.FrozenTrial], tuple[float, float] | None]
                 | None = None) -> Callable[[optuna.Study, optuna.trial.FrozenTrial], None]:
        """`stopped(trial)`: a stopped trial's (accuracy, training time) where the counting rule lets it count
        toward the front (bench/replay_arms.counted), else None."""
        def ended(study: optuna.Study, t: optuna.trial.FrozenTrial) -> None:
            ok = t.state == optuna.trial.TrialState.COMPLETE
            at = clock.now()
            if at > clock.budget_s:
                return
            if ok:
                metrics = TrialRecord.of(t).metrics
                acc = metrics.get("val_accuracy", t.values[0] if t.values else None)
                tt = metrics.get("train_time_s", t.values[1] if t.values else None)
                self.events.append((at, acc, tt, t.state.name))
                return
            point = stopped(t) if stopped is not None and t.state == optuna.trial.TrialState.PRUNED else None
            self.events.append((at, point[0] if point else None, point[1] if point else None, t.state.name))
        return ended

    def sorted(self) -> list[tuple[float, float | None, float | None, str]]:
        return sorted(self.events, key=lambda e: e[0])


__all__ = ["BudgetSpent", "Log", "SimClock", "point_of", "probe_reading", "record_of", "replay_backend",
           "replay_train", "run_workers"]
