"""The trial's meters (training/context/memory.py, energy.py): a trial's peak memory is its own, RAPL read over real
files (a fake powercap tree that counts up and wraps), the memory cap as a stop rule."""

from __future__ import annotations

import gc
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune.core import TrialStopped
from autotune.spec.settings import DEFAULTS
from autotune.training import Limits, TrainingPlan, TrialContext, run_fit
from autotune.training.context import energy
from autotune.training.context.collective import Alone
from autotune.training.context.memory import MemoryMeter
from autotune.training.context.stop_rules import StopRules
from tests import user_fits

# ---------------------------------------------------------------- peak memory


def _trial(hold_mb: int, limits: Limits | None = None, epochs: int = 2) -> TrialContext:
    return TrialContext(TrainingPlan.bare({**DEFAULTS, "device": "cpu", "epochs": epochs, "batch_size": 64},
                                          user={"hold_mb": hold_mb}, limits=limits or Limits()))


def test_a_small_trial_after_a_big_one_records_its_own_peak() -> None:
    """ru_maxrss would carry the big trial's peak into the next; the meter resets the high-water mark per trial."""
    big = run_fit(user_fits.fit_holds_memory, _trial(300))
    small = run_fit(user_fits.fit_holds_memory, _trial(0))
    # (Linux: VmHWM reset per trial; a kernel that refuses the reset: VmRSS sampled, reset per trial all the same)
    assert big.meters["peak_memory_mb"] == small.meters["peak_memory_mb"] in ("vmhwm", "vmrss_sampled")
    assert big.peak_memory_mb is not None and small.peak_memory_mb is not None
    assert big.peak_memory_mb - small.peak_memory_mb > 250  # 2 epochs x 300 MB held, against none
    assert small.peak_memory_mb < 60  # the small trial's own: what it took over the process's memory at its start
    # per epoch: the trial's peak so far, in each record and the trial's final values
    peaks = [r.peak_memory_mb for r in big.history]
    assert peaks[1] - peaks[0] > 250 and big.metrics()["peak_memory_mb"] == peaks[-1]
    assert "peak_memory_mb" in big.history[-1].as_dict()


def test_sampled_fallback_where_the_high_water_mark_cannot_be_reset(tmp_path: Path) -> None:
    """A /proc whose clear_refs refuses the write: VmRSS sampled instead (here read on demand, no waiting)."""
    (tmp_path / "clear_refs").mkdir()  # writing to it fails as a refused clear_refs does
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmHWM:\t  900000 kB\nVmRSS:\t  51200 kB\n")  # 50 MB when the trial began
    meter = MemoryMeter(torch.device("cpu"), proc=tmp_path)
    status.write_text("Name:\tpython\nVmHWM:\t  900000 kB\nVmRSS:\t  102400 kB\n")  # its model and data built
    meter.start()
    try:
        assert meter.method == "vmrss_sampled" and meter.peak_mb() == 50.0  # not the lifetime's VmHWM
        status.write_text("VmHWM:\t  900000 kB\nVmRSS:\t  512000 kB\n")
        assert meter.peak_mb() == 450.0  # over its baseline
        status.write_text("VmHWM:\t  900000 kB\nVmRSS:\t  204800 kB\n")
        assert meter.peak_mb() == 450.0  # a peak, not the current value
        meter.start()  # the same trial's training started again: from the resident set now
        assert meter.peak_mb() == 150.0
    finally:
        meter.close()
    assert meter.peak_mb() == 150.0  # readable once closed


def test_no_reading_is_absent_not_zero(tmp_path: Path) -> None:
    meter = MemoryMeter(torch.device("cpu"), proc=tmp_path / "missing")
    meter.start()
    assert meter.method is None and meter.peak_mb() is None


def test_memory_cap_stops_a_growing_trial_with_its_reason() -> None:
    cap = 300  # MB over what the process held when the trial began
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
    try:
        assert isinstance(src, energy.Rapl) and src.name == "rapl" and src.read() == 0.0
        (pkg0 / "energy_uj").write_text("1500000\n")
        (pkg1 / "energy_uj").write_text("7000000\n")
        assert src.read() == pytest.approx(2.5)  # 0.5 J + 2 J
        (pkg0 / "energy_uj").write_text("200000\n")  # wrapped past 2_000_000: 500_000 + 1 + 200_000 µJ
        assert src.read() == pytest.approx(2.5 + 0.700001)
    finally:
        if isinstance(src, energy.Rapl):
            src.close()  # (its poller thread would outlive the test)


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


# ---------------------------------------------------------------- what a CPU trial's peak counts (issue 43)


def test_memory_the_process_held_before_the_trial_is_not_the_trials() -> None:
    """300 MB held by the host (or left by an earlier trial) when a small trial begins: not in its peak."""
    held = torch.ones(300 * 2**18)
    try:
        small = run_fit(user_fits.fit_holds_memory, _trial(0))
    finally:
        del held
    assert small.peak_memory_mb is not None and small.peak_memory_mb < 60, small.peak_memory_mb


def _proc(root: Path, pid: int, status: str = "", children: str = "",
          private_kb: tuple[int, int] | None = None) -> Path:
    """A fake /proc/PID: its status, its (one) task's children, its smaps_rollup."""
    d = root / str(pid)
    (d / "task" / str(pid)).mkdir(parents=True)
    (d / "status").write_text(status)
    (d / "task" / str(pid) / "children").write_text(children)
    if private_kb is not None:
        (d / "smaps_rollup").write_text(f"Rss:  999999 kB\nPrivate_Clean:  {private_kb[0]} kB\n"
                                        f"Private_Dirty:  {private_kb[1]} kB\n")
    (d / "clear_refs").write_text("")
    return d


def test_dataloader_workers_own_memory_is_in_the_peak_fake_proc(tmp_path: Path) -> None:
    """Two workers (one with a grandchild) hold memory of their own: their private pages count, summed; what they
    share with the trial's process (the Rss of a forked worker) does not count twice; RssAnon without smaps_rollup."""
    me = _proc(tmp_path, 100, "VmHWM:\t 204800 kB\nVmRSS:\t 204800 kB\n", children="99")  # 200 MB at its start
    _proc(tmp_path, 99, private_kb=(0, 512000))  # a child the process had before the trial (a notebook's): not its
    meter = MemoryMeter(torch.device("cpu"), proc=me)
    meter.start()
    try:
        assert meter.peak_mb() == 0.0 and meter.method == "vmhwm"
        (me / "task" / "100" / "children").write_text("99 101 102")
        _proc(tmp_path, 101, children="103", private_kb=(1024, 101376))  # 100 MB its own
        _proc(tmp_path, 102, "RssAnon:\t 51200 kB\nVmRSS:\t 999999 kB\n")  # 50 MB (no smaps_rollup)
        _proc(tmp_path, 103, private_kb=(0, 25600))  # 25 MB
        (me / "status").write_text("VmHWM:\t 307200 kB\nVmRSS:\t 256000 kB\n")  # the trial itself: +100 MB
        assert meter.peak_mb() == 100.0 + 175.0 and meter.method == "vmhwm+workers"
        (me / "task" / "100" / "children").write_text("99")  # the workers are gone (the epoch ended)
        assert meter.peak_mb() == 275.0  # their peak stays in the trial's
    finally:
        meter.close()


def test_dataloader_worker_processes_are_in_the_peak() -> None:
    """A real DataLoader with 2 worker processes, each holding 150 MB of its own while it serves batches."""
    ctx = TrialContext(TrainingPlan.bare({**DEFAULTS, "device": "cpu", "epochs": 1, "batch_size": 32, "num_workers": 2,
                                          "data_on_device": False}, user={"worker_mb": 150}))
    from tests import guest_fits

    res = run_fit(guest_fits.fit_loader_workers_hold_memory, ctx)
    assert res.meters["peak_memory_mb"] in ("vmhwm+workers", "vmrss_sampled+workers"), res.meters
    assert res.peak_memory_mb is not None and res.peak_memory_mb > 2 * 150 * 0.9, res.peak_memory_mb


class _TwoRanks(Alone):
    """Two ranks that measured the same: what a sum and a max of them give."""

    def sum(self, values: Any) -> Any:
        return [2 * v for v in values]

    def max(self, values: Any) -> Any:
        return list(values)


def test_cpu_ranks_share_the_hosts_memory_their_peaks_sum(tmp_path: Path) -> None:
    from autotune.training.context.epoch_clock import EpochClock

    clock = EpochClock(torch.device("cpu"), {**DEFAULTS, "device": "cpu"}, _TwoRanks())
    clock.memory.peak_mb = lambda: 300.0  # type: ignore[method-assign]
    assert clock.peak_mb() == 600.0  # one host's memory: both ranks' (today: the max, 300)
    gpu = EpochClock(torch.device("meta"), {**DEFAULTS}, _TwoRanks())
    gpu.memory.peak_mb = lambda: 300.0  # type: ignore[method-assign]
    assert gpu.peak_mb() == 300.0  # each rank its own device: the highest
    clock.memory.peak_mb = lambda: None  # type: ignore[method-assign]
    assert clock.peak_mb() is None


def test_rapl_wrapping_twice_in_one_long_epoch_is_counted(tmp_path: Path) -> None:
    """An epoch long enough for the counter to wrap twice between its edges: read in between, every wrap counts."""
    zone = _zone(tmp_path, "intel-rapl:0", 0, max_uj=999_999)
    src = energy.Rapl([zone], poll_s=0.01)
    try:
        for uj in (600_000, 100_000, 700_000, 200_000):  # +600k, wrap +500k, +600k, wrap +500k
            (zone / "next").write_text(f"{uj}\n")
            (zone / "next").replace(zone / "energy_uj")  # (at once, as the kernel's counter reads)
            time.sleep(0.2)  # the poller reads it
        assert src.read() == pytest.approx(2.2)  # (read at the epoch's end only: 0.2 J)
    finally:
        src.close()
    assert not src._thread.is_alive()


def test_a_child_process_the_host_had_before_the_trial_is_not_the_trials() -> None:
    """A notebook's kernel has children of its own (and pytest's process, this test's): not the trial's workers."""
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "b = bytearray(200 * 2**20); b[::4096] = b'1' * (200 * 256); "
                                                    "print('ready', flush=True); import time; time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        small = run_fit(user_fits.fit_holds_memory, _trial(0))
    finally:
        child.kill()
        child.wait()
    assert small.meters["peak_memory_mb"] in ("vmhwm", "vmrss_sampled") and small.peak_memory_mb is not None
    assert small.peak_memory_mb < 60, small.peak_memory_mb


# ---------------------------------------------------------------- no thread outlives its trial


def _meter_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("autotune-") and t.is_alive()]


def test_a_context_nobody_closes_stops_its_meters_when_its_epochs_end() -> None:
    """A bare TrialContext in a notebook (no run_fit to close it), ended by its last epoch, by a break out of the
    loop, or dropped mid-epoch: its memory sampler stops (each one left polling /proc every 0.1 s: 43 of them by
    mid-run made the whole test run about twice as slow)."""
    before = set(_meter_threads())
    ends = {"last epoch": lambda ctx: [None for _ in ctx.epochs()],
            "break": lambda ctx: next(iter(ctx.epochs())),
            "dropped": lambda ctx: ctx.epochs().__next__()}
    for how, end in ends.items():
        ctx = _trial(0, epochs=3)
        ctx.prepare(user_fits.MLP())
        end(ctx)
        if how == "dropped":
            del ctx
            gc.collect()
        deadline = time.monotonic() + 5
        while set(_meter_threads()) - before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not set(_meter_threads()) - before, how
