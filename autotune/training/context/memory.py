"""A trial's peak memory (`peak_memory_mb`), measured so that one trial's peak never leaks into the next.

- CUDA: the caching allocator's peak (`torch.cuda.max_memory_allocated`), reset when the trial's training starts:
  the tensors alive then (the model, device-resident data) are part of it. Method `cuda_allocator`.
- CPU (Linux): the process's resident-set high-water mark (`VmHWM` in /proc/self/status). The kernel keeps it for
  the process's lifetime (as `ru_maxrss`), but writing "5" to /proc/self/clear_refs resets it to the resident set
  of that moment, so the peak is this trial's: its training, from the resident set it started with. Method
  `vmhwm` (the reset is the kernel's, for the whole process, and cannot be undone: Linux's `ru_maxrss` of this
  process restarts with it, so code that reads either across trials sees the current trial's). Where that reset is
  refused, a light thread samples `VmRSS` every `SAMPLE_S` (a peak shorter than that may be missed): method
  `vmrss_sampled`.
- Elsewhere (no /proc, MPS): nothing; the metric is absent, never zero.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import torch

SAMPLE_S = 0.02  # the sampling thread's period (the fallback only)
_KB = re.compile(r"^(VmHWM|VmRSS):\s+(\d+)\s+kB", re.M)


def _status_mb(proc: Path) -> dict[str, float]:
    try:
        text = (proc / "status").read_text()
    except OSError:
        return {}
    return {k: int(v) / 1024 for k, v in _KB.findall(text)}


def _clear_hwm(proc: Path) -> bool:
    """Reset the process's VmHWM to its resident set now (Linux >= 4.0); False where it is refused."""
    try:
        (proc / "clear_refs").write_text("5")
    except OSError:
        return False
    return True


class _Sampler:
    """Samples VmRSS every SAMPLE_S on a daemon thread, keeping the highest."""

    def __init__(self, proc: Path) -> None:
        self.proc = proc
        self.peak = _status_mb(proc).get("VmRSS", 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="autotune-rss", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> float:
        self.peak = max(self.peak, _status_mb(self.proc).get("VmRSS", 0.0))
        return self.peak

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def running(self) -> bool:
        return not self._stop.is_set()


class MemoryMeter:
    """One trial's peak memory in MB. `start()` when training starts (the peak restarts there), `peak_mb()` any
    time after (None where nothing can be measured), `close()` at the trial's end. `proc`: the /proc directory of
    the process (a test points it elsewhere)."""

    def __init__(self, dev: torch.device, proc: Path = Path("/proc/self")) -> None:
        self.dev = dev
        self.proc = proc
        self.method: str | None = None  # cuda_allocator | vmhwm | vmrss_sampled; None: not measured
        self._sampler: _Sampler | None = None

    def start(self) -> None:
        self.close()
        self._sampler = None
        if self.dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.dev)
            self.method = "cuda_allocator"
        elif self.dev.type == "cpu" and "VmRSS" in _status_mb(self.proc):
            if _clear_hwm(self.proc) and "VmHWM" in _status_mb(self.proc):
                self.method = "vmhwm"
            else:
                self.method = "vmrss_sampled"
                self._sampler = _Sampler(self.proc)

    def peak_mb(self) -> float | None:
        """The peak since `start()`, in MB (2**20 bytes)."""
        if self.method == "cuda_allocator":
            return torch.cuda.max_memory_allocated(self.dev) / 2**20
        if self.method == "vmhwm":
            return _status_mb(self.proc).get("VmHWM")
        if self._sampler is not None:  # (once closed: the peak it saw)
            return self._sampler.sample() if self._sampler.running else self._sampler.peak
        return None

    def close(self) -> None:
        """Stop the sampling thread, if any (the peak stays readable)."""
        if self._sampler is not None and self._sampler.running:
            self._sampler.close()


def unavailable(dev: torch.device, proc: Path = Path("/proc/self")) -> str | None:
    """Why peak memory cannot be measured on `dev` here (None: it can)."""
    if dev.type == "cuda" or (dev.type == "cpu" and "VmRSS" in _status_mb(proc)):
        return None
    return f"no peak-memory reading on {dev.type} here (CUDA's allocator, or Linux's /proc/self/status for a CPU)"


__all__ = ["SAMPLE_S", "MemoryMeter", "unavailable"]
