"""A trial's energy (`energy_j`): joules read from a hardware counter, or absent; never an estimate.

- NVIDIA GPU: NVML's total-energy counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ since the driver loaded;
  Volta and later), else NVML's power reading (`nvmlDeviceGetPowerUsage`, mW) integrated by a thread every
  `POWER_SAMPLE_S`. NVML comes from the nvidia-ml-py package (`pynvml`), imported only here and only when a trial
  trains on a GPU: never required.
- CPU: RAPL's package counters, `intel-rapl:N/energy_uj` under /sys/class/powercap (each package's, not its
  sub-zones: those are inside it), wrapping at its `max_energy_range_uj`. Package-wide: other processes' work is in
  it too. A counter that wraps more than once between two reads loses whole ranges, so a daemon thread reads it
  every `RAPL_POLL_S` (a wrap takes minutes at the very least), whatever the epochs' length.
- Elsewhere: no source (`source_for` says why); the metric is absent.

A source's `read()` is joules since it was opened; a caller takes differences.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any, Protocol

import torch

POWERCAP = Path("/sys/class/powercap")
POWER_SAMPLE_S = 0.05
RAPL_POLL_S = 5.0  # RAPL read at least this often (a 2**32 uJ range wraps in 8 s at 500 W; most ranges in hours)


class Source(Protocol):
    name: str  # what is read: nvml_energy | nvml_power_sampled | rapl
    per_device: bool  # each rank's own device (summed over ranks), else machine-wide (rank 0's only)

    def read(self) -> float: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------- RAPL


def rapl_packages(root: Path = POWERCAP) -> list[Path]:
    """The readable package zones (intel-rapl:N, not intel-rapl:N:M) under `root`."""
    if not root.is_dir():
        return []
    zones = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
    out = []
    for z in zones:
        try:
            int((z / "energy_uj").read_text())
            out.append(z)
        except (OSError, ValueError):
            continue
    return out


class Rapl:
    """The CPU packages' energy since opening, in joules, each counter's wrap-around taken into account (read at
    least once per wrap: minutes at full power on a 2**32 µJ range, hours on most)."""

    name = "rapl"
    per_device = False

    def __init__(self, zones: list[Path], poll_s: float | None = None) -> None:
        self.zones = zones
        self.ranges = [int((z / "max_energy_range_uj").read_text()) if (z / "max_energy_range_uj").exists() else 0
                       for z in zones]
        self.last = [self._raw(z) for z in zones]
        self.total_uj = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(RAPL_POLL_S if poll_s is None else poll_s,),
                                        name="autotune-rapl", daemon=True)
        self._thread.start()

    @staticmethod
    def _raw(zone: Path) -> int:
        return int((zone / "energy_uj").read_text())

    def _poll(self, period: float) -> None:
        while not self._stop.wait(period):
            with contextlib.suppress(OSError, ValueError):  # (one failed read: the next poll, or the trial's, tells)
                self.read()

    def read(self) -> float:
        with self._lock:
            for i, z in enumerate(self.zones):
                now = self._raw(z)
                delta = now - self.last[i]
                if delta < 0:  # the counter wrapped past max_energy_range_uj
                    delta += self.ranges[i] + 1 if self.ranges[i] else 0
                self.total_uj += max(0, delta)
                self.last[i] = now
            return self.total_uj / 1e6

    def close(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()


# ---------------------------------------------------------------- NVML


class NvmlEnergy:
    name = "nvml_energy"
    per_device = True

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle
        self.start = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)

    def read(self) -> float:
        joules: float = (self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) - self.start) / 1e3
        return joules

    def close(self) -> None:
        if self.handle is not None:
            self.handle = None
            self.nvml.nvmlShutdown()  # (NVML counts its inits: this one's)


class NvmlPower:
    """NVML's power reading integrated over time by a daemon thread (GPUs without the energy counter)."""

    name = "nvml_power_sampled"
    per_device = True

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle
        self.joules = 0.0
        self.t = time.monotonic()
        self.watts = nvml.nvmlDeviceGetPowerUsage(handle) / 1e3
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="autotune-power", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        with self._lock:
            now, watts = time.monotonic(), self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1e3
            self.joules += (now - self.t) * (watts + self.watts) / 2  # trapezoids
            self.t, self.watts = now, watts

    def _loop(self) -> None:
        while not self._stop.wait(POWER_SAMPLE_S):
            self._sample()

    def read(self) -> float:
        if not self._stop.is_set():
            self._sample()
        return self.joules

    def close(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self.nvml.nvmlShutdown()


def _nvml(dev: torch.device, exact: bool) -> tuple[Any, Any] | str:
    """(pynvml, the device's handle), or why not. `exact`: the very GPU torch calls `dev` (which starts CUDA in
    this process); else NVML's GPU of that number, enough to say whether this machine's GPUs have a counter (a
    config's validation must not start CUDA)."""
    try:
        import pynvml  # nvidia-ml-py: optional
    except ImportError:
        return "the nvidia-ml-py package (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, a driver without NVML...
        return f"NVML is not usable here ({type(e).__name__}: {e})"
    index = dev.index if dev.index is not None else (torch.cuda.current_device() if exact else 0)
    if exact:
        try:  # CUDA_VISIBLE_DEVICES renumbers devices: the same GPU by its UUID (NVML numbers them all)
            uuid = str(torch.cuda.get_device_properties(index).uuid)
            return pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except Exception:
            pass
    try:
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as e:
        pynvml.nvmlShutdown()
        return f"NVML does not see cuda:{index} ({type(e).__name__}: {e})"


def _nvml_source(dev: torch.device, exact: bool = True) -> Source | str:
    got = _nvml(dev, exact)
    if isinstance(got, str):
        return got
    nvml, handle = got
    try:
        return NvmlEnergy(nvml, handle)
    except Exception:  # NVMLError_NotSupported: pre-Volta GPUs lack the counter
        pass
    try:
        return NvmlPower(nvml, handle)
    except Exception as e:
        nvml.nvmlShutdown()
        return f"this GPU reports neither NVML's energy counter nor its power ({type(e).__name__})"


def source_for(dev: torch.device, powercap: Path | None = None, exact: bool = True) -> Source | str:
    """The energy source for a trial on `dev`, opened now, or one line saying what is missing. `powercap`: where
    RAPL's zones are (default POWERCAP); `exact`: see `_nvml`."""
    powercap = POWERCAP if powercap is None else powercap
    if dev.type == "cuda":
        return _nvml_source(dev, exact)
    if dev.type == "cpu":
        zones = rapl_packages(powercap)
        if zones:
            return Rapl(zones)
        return (f"no readable RAPL counter ({powercap}/intel-rapl:*/energy_uj: "
                + ("not readable by this user)" if powercap.is_dir() else "absent on this machine)"))
    return f"no energy counter on {dev.type} devices"


def unavailable(dev: torch.device, powercap: Path | None = None) -> str | None:
    """Why energy cannot be measured on `dev` here (None: it can), without starting CUDA in this process."""
    got = source_for(dev, powercap, exact=False)
    if isinstance(got, str):
        return got
    got.close()
    return None


__all__ = ["POWERCAP", "RAPL_POLL_S", "NvmlEnergy", "NvmlPower", "Rapl", "Source", "rapl_packages", "source_for",
           "unavailable"]
