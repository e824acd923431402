"""An epoch's clocks and counters: when its training starts and ends, the input wait, the samples and the
training loss, the first step's compile time, and the speed probe told of it all.

An epoch's training clock runs from its start (after a device synchronize; again when its first training batch
is asked for) to the end of its last ctx.backward step (a `StepClock`: a CUDA event per step on a GPU, read
once at the epoch's end). Nothing here waits on the device inside an epoch. The speed probe's verdicts are
returned (a `TrialStopped`), never raised.

The meters run beside the clocks: the peak memory (memory.py) restarts when the first epoch opens and is read at
each epoch's end (the trial's peak so far); the energy (energy.py) is counted over the same spans as the training
clock, from an epoch's (re)start to its report (evaluation inside the epoch's body included).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from autotune.core import TrialStopped, watchdog
from autotune.spec import Settings
from autotune.training import accel
from autotune.training.context import energy
from autotune.training.context.collective import Alone
from autotune.training.context.loaders import first_tensor
from autotune.training.context.memory import MemoryMeter
from autotune.training.context.results import EpochRecord
from autotune.training.context.stepper import Stepper
from autotune.training.throughput import ProbeDone, ProbeWindow

FINITE_CHECK_EVERY = 64  # steps between the only in-epoch host syncs: a non-finite loss stops the trial early


class EpochClock:
    """One trial's epoch clocks. `settings`: the trial's (watched) settings; `collective` reads the clock once
    every rank got there and sums the counts; `probe` (one process only) sees epochs and steps."""

    def __init__(self, dev: torch.device, settings: Settings, collective: Alone,
                 probe: ProbeWindow | None = None, data_fraction: float = 1.0) -> None:
        self.dev = dev
        self.settings = settings
        self.collective = collective
        self.probe = probe
        self.data_fraction = data_fraction  # (the probe projects the epoch's length from it)
        self.compiled = False  # the model is compiled: the very first step's compile is timed apart
        self.loader_len: int | None = None  # batches (ctx.backward calls) per epoch, when known
        self.steps_given = False  # ctx.epochs(steps_per_epoch=...) set loader_len: a training ctx.loader does not
        self.step_clock = accel.StepClock(dev)  # when the epoch's last training step ended
        self.compile_time_s = 0.0
        self.train_time_s = 0.0
        self.first_step: tuple[float, float] | None = None  # compile: (start, end) of the very first step
        self.batch_n = 1
        self.unstepped = 0  # samples of the ctx.loader batch taken last, until a ctx.backward trains on it
        self.last_batch = False
        self.memory = MemoryMeter(dev)
        self.energy: energy.Source | None = None
        self.energy_missing = ""  # why there is no energy source (once looked for)
        self.energy_j = 0.0  # over the epochs' training spans so far
        self.energy_mark = 0.0
        self.open(0)

    def open(self, epoch: int) -> None:
        """Epoch `epoch` starts now (0: none yet; the clock is not read)."""
        self.epoch = epoch
        self.running = epoch > 0  # the epoch's training clock runs (until its report, or a stop)
        self.t0 = 0.0
        self.train_end: float | None = None  # the training data ran out (a loop with no ctx.backward)
        self.wait_s = 0.0
        self.samples = 0
        self.fetched = 0
        self.fed = False  # a ctx.loader training batch was taken this epoch (else ctx.backward counts samples)
        self.steps = 0  # micro-batches this epoch
        self.loss_sum: torch.Tensor | None = None
        self.loss_n = 0
        if epoch == 1:
            self.start_meters()
        if epoch:
            self.restart()

    def start_meters(self) -> None:
        """The trial's training starts: its peak memory restarts here, its energy source is opened."""
        self.memory.start()
        if self.energy is None and not self.energy_missing:
            got = energy.source_for(self.dev)
            if isinstance(got, str):
                self.energy_missing = got
            else:
                self.energy = got

    def close_meters(self) -> None:
        """The trial is over: the meters' threads (if any) stop; what they measured stays readable."""
        self.memory.close()
        if self.energy is not None:
            self.energy.close()

    def joules_now(self) -> float:
        """The energy source's reading (0 without one). A counter that fails mid-trial (a driver reset, a file
        gone) ends the trial's energy reading, never its training: energy_j is then absent, not part-counted."""
        if self.energy is None:
            return 0.0
        try:
            return self.energy.read()
        except Exception as e:  # NVMLError, OSError, ValueError: whatever the counter raised
            self.energy_missing = f"{self.energy.name} failed in epoch {self.epoch} ({type(e).__name__}: {e})"
            with contextlib.suppress(Exception):
                self.energy.close()
            self.energy = None
            return 0.0

    def meters(self) -> dict[str, str]:
        """What measured peak_memory_mb and energy_j, or why nothing did (stored with the trial)."""
        out = {"peak_memory_mb": self.memory.method or f"not measured on {self.dev.type} here",
               "energy_j": self.energy.name if self.energy is not None else f"absent: {self.energy_missing}"}
        if self.memory.method is not None and self.dev.type == "cpu":  # what the CPU peak is counted over
            out["peak_memory_baseline_mb"] = f"{self.memory.baseline_mb:.0f}"
        return out

    def restart(self) -> None:
        """The epoch's training clock (re)starts now: at the epoch's opening, and again when its first training
        batch is asked for (whatever the loop did before, evaluating say, is not training)."""
        self.t0 = self.collective.clock(self.dev)
        self.energy_mark = self.joules_now()
        self.step_clock.start(self.t0)
        if self.probe is not None:
            self.probe.epoch_start(self.dev, self.t0)

    def took(self, batch: Any, wait_s: float, last: bool) -> None:
        """A training ctx.loader batch arrived after `wait_s` of input wait (`last`: the epoch's last)."""
        self.wait_s += wait_s
        x = first_tensor(batch)
        self.batch_n = len(x) if x is not None and x.ndim > 0 else 1
        self.unstepped = self.batch_n  # counted by the ctx.backward that trains on it
        self.fetched += self.batch_n  # (what counts when the loop steps its own optimizer, no ctx.backward)
        self.fed = True
        self.last_batch = last
        if self.compiled and self.first_step is None and self.epoch == 1:
            self.first_step = (accel.clock(self.dev), math.nan)

    def timed(self, inner: Iterable[Any], stepper: Stepper, deadline: float,
              hang: Callable[[], BaseException]) -> Iterator[Any]:
        """A training loader's batches: input wait and samples counted, the hang limit checked (`deadline`; past
        it `hang()` is raised: here for a loop that steps without ctx.backward; ctx.backward checks it before each
        step, so a batch taken and never trained on, as a loop that breaks does, stops nothing), the stepper's
        trailing accumulation stepped when the data runs out. An interrupted trial's interrupt is raised again at every
        batch asked for (watchdog.check): a fit that swallows exceptions around its steps does not train on."""
        if not self.fed and not self.steps and self.running:
            self.restart()  # the epoch's training starts here: evaluation before it is not training
        it = iter(inner)
        n_left = len(inner) if hasattr(inner, "__len__") else -1  # type: ignore[arg-type]
        while True:
            watchdog.check()  # an interrupt the fit swallowed comes back at its next batch (issue 50)
            tw = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            now = time.perf_counter()
            if now > deadline and not self.steps:
                raise hang()
            n_left -= 1
            self.took(batch, now - tw, n_left == 0)
            if stepper.ddp is not None and stepper.accum > 1:  # all-reduce only where the accumulation ends
                stepper.sync_when_due(self.last_batch)
            yield batch
        if stepper.flush():
            self.step_clock.mark()
        self.train_end = self.collective.clock(self.dev)

    def stepped(self, loss: torch.Tensor | None, n: int) -> bool:
        """A ctx.backward step of `n` samples and mean `loss` is done (its optimizer step too, if due): samples
        and loss counted (a ctx.loader batch once, by its first micro-step; a batch taken and not trained on is
        not counted), the step's end marked. True when the periodic checks are due (every FINITE_CHECK_EVERY steps).
        `loss` None: a framework's own loop stepped (autotune.integrations), whose loss is reported with the epoch
        (the periodic checks still read the memory cap)."""
        if self.fed:
            added = self.unstepped
            self.unstepped = 0
        else:  # no ctx.loader batch: this step's samples
            added = n
            if self.compiled and self.first_step is None and self.epoch == 1:
                self.first_step = (self.t0, math.nan)  # the first step started with the epoch
        self.samples += added
        self.steps += 1
        self.step_clock.mark()  # the epoch's training ends with its last step (no sync here)
        if self.first_step is not None and math.isnan(self.first_step[1]):
            self.first_step = (self.first_step[0], accel.clock(self.dev))  # compile happened in this step
        if loss is not None:
            if self.loss_sum is None:  # summed on the device: no host sync per step
                self.loss_sum = loss.detach().float() * n
            else:
                self.loss_sum.add_(loss.detach(), alpha=n)
            self.loss_n += n
        return self.steps % FINITE_CHECK_EVERY == 0

    def probe_step(self, n: int) -> TrialStopped | None:
        """The speed probe sees a step of `n` samples (called while it is not done); its verdict, if any."""
        assert self.probe is not None
        try:
            self.probe.after_step(self.dev, n, self.loader_len, self.data_fraction)
        except TrialStopped as e:
            return e
        return None

    def finite(self) -> bool:
        """The epoch's training loss so far is finite (a host sync: called every FINITE_CHECK_EVERY steps); True
        while no step gave a loss (a framework that logs the epoch's loss itself)."""
        return self.loss_sum is None or bool(torch.isfinite(self.loss_sum))

    def end(self, final: bool) -> tuple[float, TrialStopped | None]:
        """This epoch's training seconds, added to `train_time_s`: up to the end of its last ctx.backward step,
        however the loop ended (its data ran out, it broke off, it had its own batches), so evaluation after it is
        not training; without a step, up to the end of the training data, else now. Less the first step's compile
        when `time_excludes_compile`. The speed probe sees the epoch end here and may stop the trial (returned,
        with no seconds counted), but not one whose training is complete (`final`: the last epoch)."""
        end = self.step_clock.last()
        if end is None:
            end = self.train_end if self.train_end is not None else self.collective.clock(self.dev)
        self.energy_j += self.joules_now() - self.energy_mark
        if self.probe is not None:
            try:
                self.probe.epoch_end(end)
            except ProbeDone as e:  # a probe of its own has its measurement: the run ends here
                return 0.0, e
            except TrialStopped as e:
                if not final:
                    return 0.0, e
        seconds = max(0.0, end - self.t0)
        if self.epoch == 1 and self.first_step is not None and not math.isnan(self.first_step[1]):
            first = self.first_step[1] - self.first_step[0]
            typical = (seconds - first) / max(1, self.steps - 1) if self.steps > 1 else 0.0
            self.compile_time_s = max(0.0, first - typical)
            if self.settings["time_excludes_compile"]:
                seconds = max(0.0, seconds - self.compile_time_s)
        self.train_time_s += seconds
        return seconds, None

    def record(self, values: dict[str, float], seconds: float, lr: float) -> EpochRecord:
        """The epoch's record; `train_loss` is the reported one (taken out of `values`) or the mean over the
        steps' losses. On several devices samples and losses are every rank's (the clocks are rank 0's)."""
        # samples trained on by ctx.backward; a loop that steps its own optimizer: the training batches it took
        samples, loss_n = float(self.samples if self.steps else self.fetched), float(self.loss_n)
        loss_total = float(self.loss_sum) if self.loss_sum is not None else 0.0
        mine = self.energy_j if self.energy is not None and (self.energy.per_device or self.collective.rank == 0) \
            else 0.0  # a machine-wide counter (RAPL) is counted once, by rank 0
        samples, loss_total, loss_n, joules = self.collective.sum([samples, loss_total, loss_n, mine])
        peak = self.peak_mb()
        if "train_loss" in values:
            train_loss = values.pop("train_loss")
        elif loss_n:
            train_loss = loss_total / loss_n
        else:
            train_loss = math.nan
        return EpochRecord(
            epoch=self.epoch, train_loss=train_loss, epoch_time_s=seconds, train_time_s=self.train_time_s,
            samples_per_s=samples / seconds if seconds > 0 else 0.0,
            data_wait_fraction=min(1.0, self.wait_s / seconds) if seconds > 0 else 0.0, lr=lr,
            peak_memory_mb=peak, energy_j=joules if self.energy is not None else None, metrics=values)

    def peak_mb(self) -> float | None:
        """The trial's peak memory so far (None: not measured here): on GPUs the highest of its ranks' (each rank's
        own device), on the CPU their sum (the ranks share the host's memory)."""
        mine = self.memory.peak_mb()
        if self.dev.type == "cpu":
            total, measured = self.collective.sum([mine or 0.0, 0.0 if mine is None else 1.0])
            return total if measured else None
        peak = self.collective.max([-1.0 if mine is None else mine])[0]
        return None if peak < 0 else peak


def steady_rate(history: Sequence[EpochRecord]) -> float:
    """Samples/s over the steady epochs: epoch 1 (warm-up, compile) left out when there are others."""
    steady = history[1:] or history
    steady_time = sum(r.epoch_time_s for r in steady)
    return sum(r.samples_per_s * r.epoch_time_s for r in steady) / steady_time if steady_time > 0 else 0.0


def wait_fraction(history: Sequence[EpochRecord]) -> float:
    """The share of the training time spent waiting for input, over every epoch."""
    all_time = sum(r.epoch_time_s for r in history)
    return sum(r.data_wait_fraction * r.epoch_time_s for r in history) / max(1e-12, all_time)


__all__ = ["FINITE_CHECK_EVERY", "EpochClock", "steady_rate", "wait_fraction"]
