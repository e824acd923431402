"""Device choice, precision contexts (autocast + GradScaler), backend flags, channels_last, compile."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from autotune.core import AutotuneError, contention
from autotune.spec import Settings

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def resolve_device(name: str) -> torch.device:
    """`auto` picks cuda, then mps, then cpu; a named device must exist."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise AutotuneError(f"unknown device {name!r}; allowed: auto, cpu, cuda, cuda:N, mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise AutotuneError(f"device {name!r} is not available: this torch build sees no CUDA GPU")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise AutotuneError(f"device {name!r} is not available: {torch.cuda.device_count()} CUDA GPU(s) visible")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise AutotuneError(f"device {name!r} is not available on this machine")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise AutotuneError(f"unknown device {name!r}; allowed: auto, cpu, cuda, cuda:N, mps")
    return dev


def device_name(dev: torch.device, threads: int | str | None = None) -> str:
    """The device's name; a CPU's with the threads its trials use: `threads` (a fixed `cpu_threads`, or
    'searched'), else this process's torch threads."""
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "cpu":
        import platform

        n = threads or torch.get_num_threads()
        return f"cpu ({platform.processor() or platform.machine()}, {n if isinstance(n, str) else f'{n} threads'})"
    return dev.type


@functools.lru_cache(maxsize=16)
def precision_error(device_str: str, precision: str) -> str | None:
    """None if `precision` really runs a forward and backward pass on this device, else why not."""
    if precision == "fp32":
        return None
    dev = torch.device(device_str)
    try:
        lin = nn.Linear(8, 8).to(dev)
        x = torch.randn(4, 8, device=dev)
        with torch.autocast(dev.type, dtype=DTYPES[precision]):
            y = lin(x)
        if y.dtype != DTYPES[precision]:
            return f"autocast on {dev.type} computed {y.dtype}, not {precision}"
        y.float().sum().backward()
        if precision == "fp16":
            torch.amp.GradScaler(dev.type)
    except Exception as e:  # the exact error differs by device and build
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def autocast(dev: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    """Mixed precision for the forward pass; fp32 is a no-op context."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(dev.type, dtype=DTYPES[precision])


def grad_scaler(dev: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """fp16 needs loss scaling to keep small gradients from flushing to zero; bf16 does not."""
    return torch.amp.GradScaler(dev.type) if precision == "fp16" else None


@contextlib.contextmanager
def backend_flags(settings: Settings, threads: int | None = None) -> Iterator[None]:
    """Apply per-trial backend settings and put the previous ones back afterwards. `threads`: the torch threads the
    trial's plan decided (None: contention.trial_threads decides here)."""
    old_bench = torch.backends.cudnn.benchmark
    old_matmul = torch.get_float32_matmul_precision()
    old_conv_tf32 = torch.backends.cudnn.allow_tf32
    old_threads = torch.get_num_threads()
    try:
        torch.backends.cudnn.benchmark = settings["cudnn_benchmark"]
        torch.set_float32_matmul_precision(settings["matmul_precision"])
        # cuDNN's own TF32 switch defaults to True: without this, an "fp32" conv net runs TF32 convolutions.
        torch.backends.cudnn.allow_tf32 = settings["matmul_precision"] != "highest"
        if threads is None:
            threads = contention.trial_threads(settings, torch_default=old_threads)  # less one per loader process
        if threads != old_threads:
            torch.set_num_threads(threads)
        yield
    finally:
        torch.backends.cudnn.benchmark = old_bench
        torch.set_float32_matmul_precision(old_matmul)
        torch.backends.cudnn.allow_tf32 = old_conv_tf32
        torch.set_num_threads(old_threads)


def compile_model(model: nn.Module, mode: str) -> nn.Module:
    """torch.compile; compilation itself happens lazily on the first call (timed by the trial context)."""
    return torch.compile(model, mode=None if mode == "default" else mode)  # type: ignore[return-value]


def reset_compiler() -> None:
    """Forget every compiled graph: a new trial's model is traced afresh (its own compile time, no recompile
    limit reached after 8 trials; inductor's kernel cache is kept: a structure seen before compiles faster), and
    graphs / CUDA-graph pools of a finished trial are freed."""
    torch.compiler.reset()


def synchronize(dev: torch.device) -> None:
    """Wait for queued device work so a clock read measures it (GPU kernels are asynchronous)."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


def clock(dev: torch.device) -> float:
    synchronize(dev)
    return time.perf_counter()


_EVENTS: dict[str, Any] = {"cuda": torch.cuda.Event, "mps": torch.mps.Event}


class StepClock:
    """When an epoch's last training step ended, on `clock`'s time, with no host-device sync per step.

    CPU work is synchronous: a perf_counter after each step is exact. On a GPU each step records an event and
    the last one is timed against an event recorded when the epoch started (after a synchronize), read once at the
    epoch's end: evaluation or anything else queued after the last step is not in it."""

    def __init__(self, dev: torch.device) -> None:
        self.dev = dev
        self._event = _EVENTS.get(dev.type)
        self._t0 = 0.0
        self._start: Any = None
        self._end: Any = None
        self._last: float | None = None

    def start(self, t0: float) -> None:
        """The epoch's clock started at `t0`, read after a synchronize (the device is idle: an event now is t0)."""
        self._t0, self._last, self._end = t0, None, None
        if self._event is not None:
            self._start = self._record(self._event(enable_timing=True))

    def mark(self) -> None:
        """A training step was queued: the epoch's training ends when it does."""
        if self._event is None:
            self._last = time.perf_counter()
        else:
            self._end = self._record(self._end or self._event(enable_timing=True))

    def last(self) -> float | None:
        """When the last marked step ended (waits for that step only); None: no step since `start`."""
        if self._end is None:
            return self._last
        self._end.synchronize()
        return self._t0 + self._start.elapsed_time(self._end) / 1e3

    def _record(self, event: Any) -> Any:
        if self.dev.type == "cuda":
            event.record(torch.cuda.current_stream(self.dev))
        else:
            event.record()
        return event


def seed_all(seed: int) -> None:
    """torch.manual_seed, without its cost on a machine with no GPU: there torch queues a lazy CUDA (and XPU,
    MTIA) seeding call carrying a formatted stack trace on every call (about 1 ms, and kept in a list that
    grows by one entry per trial until CUDA starts, which it never does). The CPU generator is all there is."""
    mps = getattr(torch.backends, "mps", None)
    if torch.cuda.is_available() or (mps is not None and mps.is_available()):
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


_freezing = False  # inside `frozen_survivors`: each trial's survivors are frozen out of the collector's sight


@contextlib.contextmanager
def frozen_survivors() -> Iterator[None]:
    """For one study run: what lives when it starts (torch, optuna, the caches) and what each trial leaves alive
    is moved out of the collector's sight (gc.freeze), so the collection between trials scans only what the last
    trial made: 100-160 ms per trial on a 2-core machine otherwise, re-scanning the ~120,000 objects of the first
    trial's imports. Afterwards the last trial's garbage is collected and everything frozen is unfrozen: the
    process is as before (gc.get_freeze_count() included). Something frozen before the run (the caller's own
    gc.freeze, which cannot be told apart from ours) is left alone: then this run freezes nothing."""
    import gc

    global _freezing
    mine = not _freezing and gc.get_freeze_count() == 0
    if mine:
        gc.freeze()  # no collection first: whatever garbage is frozen here is collectable again after the run
        _freezing = True
    try:
        yield
    finally:
        if mine:
            _freezing = False
            gc.collect()  # the last trial's garbage (young objects only: a fraction of a millisecond)
            gc.unfreeze()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


def freeze_survivors() -> None:
    """Before a trial: collect what the previous trial and the study's bookkeeping since left (its exception's
    reference cycles included), then, inside `frozen_survivors`, freeze whatever is alive now: it lives on."""
    import gc

    gc.collect()
    if _freezing:
        gc.freeze()


def release_memory() -> None:
    """Free what a finished trial held, so the next one starts from an empty allocator."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def after_trial() -> None:
    """After a trial: with CUDA, release its memory at once (release_memory). Without, there is no allocator cache
    to empty, and the next trial's `freeze_survivors` collects the same garbage a moment later: one collection per
    trial, not two (each ~0.2-0.7 ms of bookkeeping, a third of autotune's own per-trial cost on a trivial trial)."""
    if torch.cuda.is_available():
        release_memory()


# Allocation failures that are not torch.OutOfMemoryError: cuBLAS / cuDNN / cuSOLVER / cuFFT creating a handle or
# a workspace while torch's caching allocator holds the memory (a smaller batch helps as with any OOM).
# torch words them "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`" and
# "cuDNN error: CUDNN_STATUS_ALLOC_FAILED" (cuDNN 8) / "...CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED" (9).
OOM_MARKERS = ("out of memory", "cublas_status_alloc_failed", "cudnn_status_alloc_failed",
               "cudnn_status_internal_error_device_allocation_failed", "cudnn_status_not_enough_workspace",
               "cusolver_status_alloc_failed", "cufft_alloc_failed",
               # the host: torch's CPU allocator ("DefaultCPUAllocator: can't allocate memory", Windows' "not
               # enough memory"), and the C library's ENOMEM text
               "defaultcpuallocator", "can't allocate memory", "cannot allocate memory", "not enough memory")
# CUDA's "sticky" errors: the context is corrupt and every later CUDA call in the process fails the same way, so
# the process must stop (cudaGetErrorString's words; torch prefixes "CUDA error: ", Triton "Triton Error [CUDA]: ").
FATAL_CUDA_MARKERS = ("an illegal memory access was encountered", "device-side assert triggered",
                      "unspecified launch failure", "uncorrectable ecc error encountered",
                      "an illegal instruction was encountered", "misaligned address", "hardware stack error",
                      "invalid program counter", "operation not supported on global/shared address space",
                      "the launch timed out and was terminated", "uncorrectable nvlink error",
                      "cuda_error_illegal_address", "cuda_error_assert", "cuda_error_launch_failed",
                      "cuda_error_ecc_uncorrectable", "cuda_error_illegal_instruction", "cuda_error_misaligned_address",
                      "cuda_error_hardware_stack_error")
# The same errors as cudaError_t codes (torch.AcceleratorError carries one where its build exposes it).
FATAL_CUDA_CODES = frozenset({214, 220, 700, 702, 710, 714, 715, 716, 717, 718, 719})


def is_oom(exc: BaseException) -> bool:
    """Out of device (or host) memory: worth a retry with a smaller batch once the memory is freed."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    if not isinstance(exc, RuntimeError) or is_fatal_device_error(exc):
        return False
    text = str(exc).lower()
    return any(m in text for m in OOM_MARKERS)


def is_fatal_device_error(exc: BaseException) -> bool:
    """A CUDA error after which this process's CUDA context is broken (illegal memory access, device-side
    assert, launch failure, uncorrectable ECC...): no later trial in the process can run, so stop it."""
    if not isinstance(exc, RuntimeError):
        return False
    if getattr(exc, "error_code", None) in FATAL_CUDA_CODES:
        return True
    text = str(exc).lower()
    return ("cuda" in text or "triton" in text) and any(m in text for m in FATAL_CUDA_MARKERS)
