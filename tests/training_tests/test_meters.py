"""The trial's meters (training/context/memory.py, energy.py): a trial's peak memory is its own, RAPL read over real
files (a fake powercap tree that counts up and wraps), the memory cap as a stop rule."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from autotune.core import TrialStopped, watchdog
from autotune.spec.settings import DEFAULTS
from autotune.training import Limits, TrialContext, TrialSetup, run_fit
from autotune.training.context import energy
from autotune.training.context.collective import Alone
from autotune.training.context.memory import MemoryMeter
from autotune.training.context.stop_rules import StopRules
from tests import user_fits

# ---------------------------------------------------------------- peak memory


def _trial(hold_mb: int, limits: Limits | None = None, epochs: int = 2) -> TrialContext:
    return TrialContext({**DEFAULTS, "device": "cpu", "epochs": epochs, "batch_size": 64},
                        user_params={"hold_mb": hold_mb}, setup=TrialSetup(limits=limits or Limits()))


def test_a_small_trial_after_a_big_one_records_its_own_peak() -> None:
    """ru_maxrss would carry the big trial's peak into the next; the meter resets the high-water mark per trial."""
    big = run_fit(user_fits.fit_holds_memory, _trial(300))
    base = watchdog.rss_mb()
    small = run_fit(user_fits.fit_holds_memory, _trial(0))
    # (Linux: VmHWM reset per trial; a kernel that refuses the reset: VmRSS sampled, reset per trial all the same)
    assert big.meters["peak_memory_mb"] == small.meters["peak_memory_mb"] in ("vmhwm", "vmrss_sampled")
    assert big.peak_memory_mb is not None and small.peak_memory_mb is not None
    assert big.peak_memory_mb - small.peak_memory_mb > 250  # 2 epochs x 300 MB held, against none
    assert base is not None and small.peak_memory_mb < base + 60  # the small trial's own: its start, plus a little
    # per epoch: the trial's peak so far, in each record and the trial's final values
    peaks = [r.peak_memory_mb for r in big.history]
    assert peaks[1] - peaks[0] > 250 and big.metrics()["peak_memory_mb"] == peaks[-1]
    assert "peak_memory_mb" in big.history[-1].as_dict()


def test_sampled_fallback_where_the_high_water_mark_cannot_be_reset(tmp_path: Path) -> None:
    """A /proc whose clear_refs refuses the write: VmRSS sampled instead (here read on demand, no waiting)."""
    (tmp_path / "clear_refs").mkdir()  # writing to it fails as a refused clear_refs does
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmHWM:\t  900000 kB\nVmRSS:\t  102400 kB\n")
    meter = MemoryMeter(torch.device("cpu"), proc=tmp_path)
    meter.start()
    try:
        assert meter.method == "vmrss_sampled" and meter.peak_mb() == 100.0  # not the lifetime's VmHWM
        status.write_text("VmHWM:\t  900000 kB\nVmRSS:\t  512000 kB\n")
        assert meter.peak_mb() == 500.0
        status.write_text("VmHWM:\t  900000 kB\nVmRSS:\t  204800 kB\n")
        assert meter.peak_mb() == 500.0  # a peak, not the current value
        meter.start()  # the next trial starts from its own resident set
        assert meter.peak_mb() == 200.0
    finally:
        meter.close()
    assert meter.peak_mb() == 200.0  # readable once closed


def test_no_reading_is_absent_not_zero(tmp_path: Path) -> None:
    meter = MemoryMeter(torch.device("cpu"), proc=tmp_path / "missing")
    meter.start()
    assert meter.method is None and meter.peak_mb() is None


def test_memory_cap_stops_a_growing_trial_with_its_reason() -> None:
    base = watchdog.rss_mb()
    assert base is not None
    cap = base + 300
    with pytest.raises(TrialStopped) as e:
        run_fit(user_fits.fit_holds_memory, _trial(200, Limits(max_peak_memory_mb=cap), epochs=3))
    assert e.value.reason == "memory" and e.value.epoch == 2
    peak = float(e.value.detail.split()[1])
    assert peak > cap and e.value.detail == f"peak {peak:.0f} MB > max_peak_memory_mb {cap:g}"


def test_memory_cap_inside_an_epoch() -> None:
    """The periodic in-epoch check (every FINITE_CHECK_EVERY steps) stops a trial over the cap there."""
    rules = StopRules(DEFAULTS, Limits(max_peak_memory_mb=500))
    stop = rules.periodic(True, Alone(), 3, lambda: 812.4)
    assert stop is not None and (stop.reason, stop.epoch, stop.detail) == (
        "memory", 3, "peak 812 MB > max_peak_memory_mb 500")
    assert rules.periodic(True, Alone(), 3, lambda: 499.0) is None
    assert rules.periodic(True, Alone(), 3, lambda: None) is None  # nothing measured: nothing decided
    assert StopRules(DEFAULTS, Limits()).periodic(True, Alone(), 3, lambda: 10**6) is None  # no cap


# ---------------------------------------------------------------- energy


def _zone(root: Path, name: str, uj: int, max_uj: int | None = None) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "energy_uj").write_text(f"{uj}\n")
    if max_uj is not None:
        (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return z


def test_rapl_reads_packages_and_wraps_around(tmp_path: Path) -> None:
    pkg0 = _zone(tmp_path, "intel-rapl:0", 1_000_000, max_uj=2_000_000)
    pkg1 = _zone(tmp_path, "intel-rapl:1", 5_000_000, max_uj=10_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 3_000_000)  # a sub-zone (core): inside its package, not counted again
    (tmp_path / "intel-rapl:2").mkdir()  # a package whose counter cannot be read: left out
    assert energy.rapl_packages(tmp_path) == [pkg0, pkg1]
    src = energy.source_for(torch.device("cpu"), tmp_path)
    assert isinstance(src, energy.Rapl) and src.name == "rapl" and src.read() == 0.0
    (pkg0 / "energy_uj").write_text("1500000\n")
    (pkg1 / "energy_uj").write_text("7000000\n")
    assert src.read() == pytest.approx(2.5)  # 0.5 J + 2 J
    (pkg0 / "energy_uj").write_text("200000\n")  # wrapped past 2_000_000: 500_000 + 1 + 200_000 µJ
    assert src.read() == pytest.approx(2.5 + 0.700001)


def test_energy_absent_where_no_counter_is_readable(tmp_path: Path) -> None:
    why = energy.source_for(torch.device("cpu"), tmp_path / "powercap")
    assert why == f"no readable RAPL counter ({tmp_path / 'powercap'}/intel-rapl:*/energy_uj: absent on this machine)"
    assert energy.unavailable(torch.device("cpu"), tmp_path / "powercap") == why
    assert energy.unavailable(torch.device("meta")) == "no energy counter on meta devices"


def test_a_trial_records_rapl_energy_per_epoch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The context reads the counter over each epoch's training span; here the fake counter does not move, so 0 J
    is what was measured (a measurement, not a default: without a counter the key is absent)."""
    _zone(tmp_path, "intel-rapl:0", 1_000, max_uj=2**32)
    monkeypatch.setattr(energy, "POWERCAP", tmp_path)
    res = run_fit(user_fits.fit_holds_memory, _trial(0))
    assert res.meters["energy_j"] == "rapl" and res.energy_j == 0.0
    assert [r.as_dict()["energy_j"] for r in res.history] == [0.0, 0.0]
    monkeypatch.setattr(energy, "POWERCAP", tmp_path / "none")
    res = run_fit(user_fits.fit_holds_memory, _trial(0))
    assert res.energy_j is None and "energy_j" not in res.metrics()
    assert all("energy_j" not in r.as_dict() for r in res.history)
    assert res.meters["energy_j"].startswith("absent: no readable RAPL counter")


class FakeNvml:
    """NVML's calls as nvidia-ml-py names them, over counters the test moves (no GPU here)."""

    class NVMLError(Exception):
        pass

    def __init__(self, energy_mj: int | None, power_mw: int) -> None:
        self.energy_mj, self.power_mw, self.inits = energy_mj, power_mw, 0

    def nvmlInit(self) -> None:  # noqa: N802 (NVML's names)
        self.inits += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.inits -= 1

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802
        raise self.NVMLError("not found")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802
        return f"gpu{index}"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:  # noqa: N802
        if self.energy_mj is None:
            raise self.NVMLError("Not Supported")
        return self.energy_mj

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:  # noqa: N802
        return self.power_mw


def test_nvml_energy_counter_then_power_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = torch.device("cuda", 0)
    nvml = FakeNvml(energy_mj=10_000, power_mw=150_000)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    src = energy.source_for(gpu)
    assert isinstance(src, energy.NvmlEnergy) and src.per_device and src.read() == 0.0
    nvml.energy_mj += 2_500
    assert src.read() == 2.5
    src.close()
    assert nvml.inits == 0
    # a GPU without the energy counter: its power integrated over time (trapezoids), here on a clock the test moves
    now = [100.0]
    monkeypatch.setattr(energy.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(energy, "POWER_SAMPLE_S", 3600.0)  # the thread stays asleep: the test samples by reading
    nvml.energy_mj = None
    src = energy.source_for(gpu)
    try:
        assert isinstance(src, energy.NvmlPower) and src.name == "nvml_power_sampled"
        now[0] += 2.0
        nvml.power_mw = 250_000
        assert src.read() == pytest.approx(2.0 * (150 + 250) / 2)
    finally:
        src.close()
    assert nvml.inits == 0
    assert energy.unavailable(gpu) is None and nvml.inits == 0  # (validation's look: opened, closed)


def test_no_nvml_package_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert energy.unavailable(torch.device("cuda", 0)) == "the nvidia-ml-py package (pynvml) is not installed"


def test_a_counter_that_fails_mid_trial_leaves_energy_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A RAPL zone that disappears while the trial trains: the trial trains on, its energy is absent (not the part
    read before), and `meters` says why."""
    zone = _zone(tmp_path, "intel-rapl:0", 1_000, max_uj=2**32)
    monkeypatch.setattr(energy, "POWERCAP", tmp_path)
    ctx = _trial(0)
    real_report = ctx.report

    def report(**metrics: float) -> None:
        (zone / "energy_uj").unlink(missing_ok=True)  # gone before the epoch's report reads it
        real_report(**metrics)

    monkeypatch.setattr(ctx, "report", report)
    res = run_fit(user_fits.fit_holds_memory, ctx)
    assert res.epochs_run == 2 and res.energy_j is None and "energy_j" not in res.history[0].as_dict()
    assert res.meters["energy_j"].startswith("absent: rapl failed in epoch 1 (FileNotFoundError")
