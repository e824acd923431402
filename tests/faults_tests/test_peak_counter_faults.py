"""Faults in what a guest leaves of its host's counters: a host that measures its own peak memory (a service's
metrics, a notebook's `%memit`, a batch job's accounting read through `getrusage`) must read its own value after
`autotune.run`, not one a trial reset. A real host process, real allocations, the kernel's real counters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HOST = """
import json, re, resource, sys
import autotune

def hwm_kb():
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))

block = bytearray(400 << 20)  # the host's own work: 400 MB, touched, then freed
block[::4096] = b"x" * len(block[::4096])
del block
before = {"ru_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "vmhwm_kb": hwm_kb()}
cfg = autotune.load_config(sys.argv[1])
res = autotune.run(cfg)
after = {"ru_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "vmhwm_kb": hwm_kb()}
trial = res.study.trials[0]
print(json.dumps({"before": before, "after": after, "state": trial.state.name,
                  "peak_memory_mb": trial.user_attrs.get("peak_memory_mb"),
                  "method": trial.user_attrs.get("meters", {}).get("peak_memory_mb")}))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux: the high-water mark a trial reset")
def test_a_host_reads_its_own_peak_memory_after_a_study(tmp_path: Path) -> None:
    """Today: each CPU trial wrote /proc/self/clear_refs, and the host's ru_maxrss and VmHWM restarted from what the
    process held then (measured: 422 MB of the host's own before the study, 379 MB after it). Now they are the
    host's, and the trial still has its peak (sampled)."""
    run_file = tmp_path / "h.yaml"
    run_file.write_text(f"study: {{name: h, storage: 'sqlite:///{tmp_path}/h.db', n_trials: 1}}\n"
                        "trainer: tests.user_fits:fit_quick\ntrain: {epochs: 1, batch_size: 64}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", HOST, str(run_file)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    before, after = out["before"], out["after"]
    assert before["ru_maxrss_kb"] > 400 * 1024
    assert after["ru_maxrss_kb"] >= before["ru_maxrss_kb"], out
    assert after["vmhwm_kb"] >= before["vmhwm_kb"], out
    assert out["state"] == "COMPLETE" and out["method"] == "vmrss_sampled", out
    assert out["peak_memory_mb"] is not None and 0 <= out["peak_memory_mb"] < 400, out  # the trial's, not the host's
