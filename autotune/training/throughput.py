"""The speed probe's measurement: steady-state samples/s from a few training steps, taken inside the trial context.

A `ProbeWindow` rides on a trial context (`TrialContext(plan, probe=...)`): the context tells it where each epoch's
training clock starts and stops and when a step (`ctx.backward`) is done. After `warmup` steps (the first one
compiles, autotunes kernels, fills caches) it times at least `steps` more and at least `min_seconds`, pausing
over whatever is not training (evaluation between epochs), then hands a `Measurement` to `on_measured`, which
may stop the trial (`TrialStopped`). With `end_run` the run then ends (`ProbeDone`): a probe of its own, for
`autotune speed` and the `probe_then_tune` strategy; without it the trial trains on, measured for free.
`RepeatedWindow` times several such windows back to back on one run (after one warm-up) and keeps the median,
with their spread: one window is one reading of a noisy clock on a busy machine.

`compile_time_s` is the first step less a steady one only when the trial compiles (`compiled=True`); otherwise
it is 0, and the slow first step (allocator, caches, lazy initialisation) is only in `first_step_s`.

The same `fit(ctx)` runs either way, built-in or a user's: one place measures throughput for both.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from autotune.core import TrialStopped, contention
from autotune.training import accel

WARMUP_STEPS = 3  # the first compiles and autotunes; the next two settle caches and the allocator
TIMED_STEPS = 5
MIN_SECONDS = 0.05  # a few steps of a tiny model last microseconds: below this the clock is mostly noise
MAX_STEPS = 200


class ProbeDone(TrialStopped):
    """A probe of its own (`end_run`) has its measurement: the run ends here."""

    def __init__(self, measurement: Measurement) -> None:
        # not a trial's stop reason (never stored): TrialStopped's own check of the reason is skipped
        Exception.__init__(self, f"probe done: {measurement.samples_per_s:,.0f} samples/s")
        self.reason, self.epoch, self.detail = "probe", 0, str(self)
        self.measurement = measurement


@dataclass(frozen=True)
class Measurement:
    samples_per_s: float
    steps_per_s: float
    timed_steps: int
    timed_s: float
    first_step_s: float  # the first step alone: compile (and kernel autotuning) included
    compile_time_s: float  # first_step_s less a steady step: what compiling cost (0 when nothing compiles)
    epoch_samples: float | None  # samples in one epoch of all the training data (data_fraction 1); None: unknown
    peak_memory_bytes: int | None  # the device's peak allocation during the run (CUDA); None where not reported

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


class ProbeWindow:
    """Times steps `warmup + 1 .. warmup + n` of a trial's training, on the context's own clocks."""

    def __init__(self, on_measured: Callable[[Measurement], None] | None = None, end_run: bool = False,
                 warmup: int = WARMUP_STEPS, steps: int = TIMED_STEPS, min_seconds: float = MIN_SECONDS,
                 max_steps: int = MAX_STEPS, compiled: bool = False) -> None:
        self.on_measured = on_measured
        self.end_run = end_run
        self.compiled = compiled  # the trial compiles its model: its first step's extra time is compile's
        self.warmup, self.steps, self.min_seconds, self.max_steps = warmup, steps, min_seconds, max_steps
        self.measurement: Measurement | None = None
        self._dev: torch.device | None = None
        self._count = 0  # micro-batch steps so far
        self._first_t0: float | None = None
        self._first_step_s = math.nan
        self._start: float | None = None  # the running part of the timed window started here (None: paused)
        self._timed_s = 0.0  # timed seconds before the current part (earlier epochs)
        self._timed_steps = 0
        self._samples = 0
        self._epoch: tuple[int | None, int, float] = (None, 1, 1.0)  # (batches per epoch, batch size, data_fraction)
        self._cpu: contention.Window | None = None  # the CPU this process gets while the window times
        self.share: contention.Share | None = None  # what it got over the measured window (None: not measured)

    @property
    def done(self) -> bool:
        return self.measurement is not None

    # ---------------------------------------------------------------- called by the trial context

    def epoch_start(self, dev: torch.device, t: float) -> None:
        """An epoch's training clock started at `t` (after a device synchronize)."""
        if self.done:
            return
        if self._dev is None:
            self._dev = dev
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
        if self._first_t0 is None or self._count == 0:  # (restarted before its first step: from there)
            self._first_t0 = t
        if self._count >= self.warmup:
            self._start = t

    def epoch_end(self, t: float) -> None:
        """The epoch's training clock stopped at `t` (its data ran out, or it reported). A window that has its
        steps but not yet `min_seconds` (a short epoch of a small model) is measured here: the epoch's own
        rules come next, and they should see the measurement."""
        if self._start is not None and not self.done:
            self._timed_s += max(0.0, t - self._start)
            self._start = None
            if self._timed_steps >= self.steps:
                self._measure(self._timed_s)

    def after_step(self, dev: torch.device, batch_samples: int, epoch_batches: int | None,
                   data_fraction: float) -> None:
        """One micro-batch of `batch_samples` samples was stepped (backward, and maybe the optimizer), out of
        `epoch_batches` per epoch (None: not known, the data is not a ctx.loader). May raise TrialStopped."""
        if self.done:
            return
        self._count += 1
        self._dev = dev
        if self._count == 1 and self._first_t0 is not None:
            self._first_step_s = accel.clock(dev) - self._first_t0
        if self._count == self.warmup:
            self._start = accel.clock(dev)
            self._cpu = contention.Window()
            return
        if self._count <= self.warmup or self._start is None:
            return
        self._timed_steps += 1
        self._samples += batch_samples
        self._epoch = (epoch_batches, batch_samples, data_fraction)
        elapsed = self._timed_s + time.perf_counter() - self._start  # the host's view: enough to decide when
        if self._timed_steps < self.steps or (elapsed < self.min_seconds and self._timed_steps < self.max_steps):
            return
        timed = self._timed_s + accel.clock(dev) - self._start  # after a synchronize: what the device did
        self._start = None
        self._measure(timed)

    def _measure(self, timed: float) -> None:
        self.share = self._cpu.share() if self._cpu is not None else None
        self._finish(self._measurement(timed))

    @property
    def contended(self) -> bool:
        """This process waited for cores while the window timed (others held them): not the settings' speed."""
        return self.share is not None and contention.contended(self.share)

    def _finish(self, measurement: Measurement) -> None:
        self.measurement = measurement
        if self.on_measured is not None:
            self.on_measured(measurement)
        if self.end_run:
            raise ProbeDone(measurement)

    def _measurement(self, timed: float) -> Measurement:
        dev = self._dev
        assert dev is not None
        steady = timed / max(1, self._timed_steps)
        batches, batch_size, fraction = self._epoch
        full = batches * batch_size / fraction if batches else None
        peak = int(torch.cuda.max_memory_allocated(dev)) if dev.type == "cuda" else None
        first = self._first_step_s if math.isfinite(self._first_step_s) else steady
        return Measurement(
            samples_per_s=self._samples / timed if timed > 0 else 0.0,
            steps_per_s=self._timed_steps / timed if timed > 0 else 0.0, timed_steps=self._timed_steps,
            timed_s=timed, first_step_s=first, compile_time_s=max(0.0, first - steady) if self.compiled else 0.0,
            epoch_samples=full, peak_memory_bytes=peak)


class RepeatedWindow(ProbeWindow):
    """Windows of `steps` timed steps (each at least `min_seconds`) back to back on one run, after one warm-up,
    until the last `agree` of them lie within `tolerance` of their median (max - min over the median) or
    `max_windows` are timed. The measurement is the median of those last windows; `spread` is their
    (max - min) / median, `windows` every window timed."""

    def __init__(self, *args: Any, agree: int = 3, tolerance: float = 0.1, max_windows: int = 8,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agree, self.tolerance, self.max_windows = agree, tolerance, max_windows
        self.windows: list[Measurement] = []
        self.shares: list[contention.Share | None] = []  # the CPU this process got over each window
        self.spread = math.nan
        self._restart = False  # a window just closed after a step: the next one starts now

    def _measure(self, timed: float) -> None:
        self.windows.append(self._measurement(timed))
        self.shares.append(self._cpu.share() if self._cpu is not None else None)
        self._cpu = contention.Window()  # the next window's
        last = sorted(self.windows[-self.agree:], key=lambda m: m.samples_per_s)
        mid = last[len(last) // 2]
        rates = [m.samples_per_s for m in last]
        self.spread = (rates[-1] - rates[0]) / mid.samples_per_s if mid.samples_per_s > 0 else math.inf
        if len(self.windows) < self.max_windows and (len(last) < self.agree or self.spread > self.tolerance):
            self._timed_s, self._timed_steps, self._samples, self._restart = 0.0, 0, 0, True
            return
        self.share = _merged([s for s in self.shares[-self.agree:] if s is not None])
        self._finish(mid)

    def after_step(self, dev: torch.device, batch_samples: int, epoch_batches: int | None,
                   data_fraction: float) -> None:
        super().after_step(dev, batch_samples, epoch_batches, data_fraction)
        if self._restart:  # the window closed on this step's synchronize: the next one is timed from here
            self._restart = False
            self._start = time.perf_counter()

    def epoch_end(self, t: float) -> None:
        super().epoch_end(t)
        self._restart = False  # closed at the epoch's end: the next epoch's start resumes the timing


def _merged(shares: list[contention.Share]) -> contention.Share | None:
    """The CPU got over several windows together."""
    if not shares:
        return None
    run, wait = sum(s.run_s for s in shares), sum(s.wait_s for s in shares)
    return contention.Share(sum(s.wall_s for s in shares), run, wait, wait / (run + wait) if run + wait > 0 else 0.0)


__all__ = ["MAX_STEPS", "MIN_SECONDS", "Measurement", "ProbeDone", "ProbeWindow", "RepeatedWindow", "TIMED_STEPS",
           "WARMUP_STEPS"]
