"""accel.py: which device errors are out-of-memory (retry smaller) and which break the CUDA context (stop).

The texts are the ones torch and CUDA produce: c10's CUDA check writes "CUDA error: " + cudaGetErrorString(...)
plus a hint; cuBLAS checks add "when calling `...`"; cuDNN checks write "cuDNN error: " + the status name; Triton
writes "Triton Error [CUDA]: "; the driver API check writes "CUDA driver error: ".
"""

from __future__ import annotations

import time

import pytest
import torch

from autotune.training import accel

ASYNC = ("\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
         "be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to "
         "enable device-side assertions.\n")

OOM = [
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB "
                           "of which 1.06 GiB is free. Of the allocated memory 130.2 GiB is allocated by PyTorch"),
    RuntimeError("CUDA error: out of memory" + ASYNC),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasLtMatmul( ltHandle, "
                 "computeDesc.descriptor(), &alpha_val, mat1_ptr, Adesc.descriptor(), ...)`"),
    RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),  # cuDNN 8
    RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"),  # cuDNN 9
    RuntimeError("cuDNN error: CUDNN_STATUS_NOT_ENOUGH_WORKSPACE"),
    RuntimeError("cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate(handle)`"),
    MemoryError(),
]

FATAL = [
    RuntimeError("CUDA error: an illegal memory access was encountered" + ASYNC),
    RuntimeError("CUDA error: device-side assert triggered" + ASYNC),
    RuntimeError("CUDA error: unspecified launch failure" + ASYNC),
    RuntimeError("CUDA error: uncorrectable ECC error encountered\n"),
    RuntimeError("CUDA error: misaligned address" + ASYNC),
    RuntimeError("CUDA error: an illegal instruction was encountered" + ASYNC),
    RuntimeError("CUDA error: the launch timed out and was terminated\n"),
    RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered"),
    RuntimeError("Triton Error [CUDA]: device-side assert triggered"),
    RuntimeError("CUDA driver error: an illegal memory access was encountered"),
    RuntimeError("cuLaunchKernel failed: <CUresult.CUDA_ERROR_ILLEGAL_ADDRESS: 700>"),
    torch.AcceleratorError("CUDA error: an illegal memory access was encountered" + ASYNC),
]

NEITHER = [
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (64x128 and 256x10)"),
    RuntimeError("CUDA error: invalid device ordinal" + ASYNC),  # a bad index, not a broken context
    RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous "
                 "input."),
    RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx(...)`"),
    ValueError("out of memory"),  # not a device error type
    RuntimeError("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"),
]


@pytest.mark.parametrize("exc", OOM, ids=lambda e: str(e)[:48] or type(e).__name__)
def test_allocation_failures_are_oom_not_fatal(exc: BaseException) -> None:
    assert accel.is_oom(exc)
    assert not accel.is_fatal_device_error(exc)


@pytest.mark.parametrize("exc", FATAL, ids=lambda e: str(e)[:48])
def test_sticky_cuda_errors_are_fatal_not_oom(exc: BaseException) -> None:
    assert accel.is_fatal_device_error(exc)
    assert not accel.is_oom(exc)  # retrying in a broken context would fail again, whatever the batch size


@pytest.mark.parametrize("exc", NEITHER, ids=lambda e: str(e)[:48])
def test_other_errors_are_neither(exc: BaseException) -> None:
    assert not accel.is_oom(exc)
    assert not accel.is_fatal_device_error(exc)


def test_an_error_code_alone_marks_a_fatal_error() -> None:
    """A torch build without error messages (STRIP_ERROR_MESSAGES) still carries the cudaError_t code."""
    exc = torch.AcceleratorError("")
    exc.error_code = 700  # type: ignore[attr-defined]  # cudaErrorIllegalAddress
    assert accel.is_fatal_device_error(exc)
    exc.error_code = 2  # type: ignore[attr-defined]  # cudaErrorMemoryAllocation: recoverable
    assert not accel.is_fatal_device_error(exc)


class _FakeEvent:
    """A device event on the host's clock: recorded when queued (a device that is never behind)."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.t = float("nan")

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _FakeEvent) -> float:
        return (end.t - self.t) * 1e3


@pytest.mark.parametrize("events", [False, True])
def test_step_clock_ends_at_the_last_marked_step(events: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if events:  # the GPU's path: events timed against the epoch's start event, read once
        monkeypatch.setitem(accel._EVENTS, "cpu", _FakeEvent)
    clock = accel.StepClock(torch.device("cpu"))
    t0 = time.perf_counter()
    clock.start(t0)
    assert clock.last() is None  # no step yet
    clock.mark()
    marked = time.perf_counter()
    time.sleep(0.05)  # evaluation after the step: not in it
    end = clock.last()
    assert end is not None and t0 <= end <= marked
    clock.start(time.perf_counter())  # a new epoch forgets the last one's steps
    assert clock.last() is None


# ---------------------------------------------------------------- the collector, frozen for a run only


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_run_freezes_trial_survivors_and_leaves_the_collector_as_it_was() -> None:
    import gc
    import weakref

    before = gc.get_freeze_count()
    assert before == 0  # nothing earlier in this process left objects frozen (an earlier run included)
    with accel.frozen_survivors():
        accel.freeze_survivors()  # a trial starts: what lives now is frozen
        assert gc.get_freeze_count() > 0
        garbage = weakref.ref(_Cycle())  # the last trial's reference cycle, never collected during the run
    assert gc.get_freeze_count() == before
    assert garbage() is None  # collected as the run ends
    accel.freeze_survivors()  # outside a run: a collection, nothing frozen
    assert gc.get_freeze_count() == before


def test_a_run_freezes_nothing_when_the_caller_had_frozen_objects() -> None:
    import gc

    gc.freeze()
    try:
        theirs = gc.get_freeze_count()
        with accel.frozen_survivors():
            accel.freeze_survivors()
            assert gc.get_freeze_count() <= theirs  # (freed frozen objects lower it)
        assert gc.get_freeze_count() <= theirs
    finally:
        gc.unfreeze()
