"""`autotune doctor`: what this machine can run, each capability actually tried on a tiny model."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from typing import Any

import optuna
import torch
from torch import nn

from autotune.core import __version__
from autotune.spec import SETTINGS
from autotune.training import accel, energy_unavailable, memory_unavailable


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def _try_compile(dev: torch.device) -> Check:
    """A real torch.compile of a tiny model, forward and backward (needs a C++ compiler on CPU)."""
    try:
        model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)).to(dev)
        compiled = torch.compile(model)
        t0 = time.perf_counter()
        compiled(torch.randn(8, 16, device=dev)).sum().backward()
        accel.synchronize(dev)
        return Check("compile", True, f"torch.compile forward+backward in {time.perf_counter() - t0:.1f}s")
    except Exception as e:  # inductor failures come in many types
        return Check("compile", False, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")


def _try_channels_last(dev: torch.device) -> Check:
    try:
        conv = nn.Conv2d(3, 8, 3).to(dev).to(memory_format=torch.channels_last)
        y = conv(torch.randn(2, 3, 8, 8, device=dev).contiguous(memory_format=torch.channels_last))
        return Check("channels_last", True, f"conv output channels_last: "
                                            f"{y.is_contiguous(memory_format=torch.channels_last)}")
    except Exception as e:
        return Check("channels_last", False, f"{type(e).__name__}: {e}")


def report(device: str = "auto", with_compile: bool = True) -> dict[str, Any]:
    dev = accel.resolve_device(device)
    checks = []
    for p in SETTINGS["precision"].choices:
        why = accel.precision_error(str(dev), p)
        checks.append(Check(f"precision {p}", why is None, why or "autocast forward+backward ran"))
    checks.append(_try_channels_last(dev))
    if with_compile:
        checks.append(_try_compile(dev))
    # the meters: may peak_memory_mb and energy_j be objectives or constraints here
    why = memory_unavailable(dev)
    checks.append(Check("peak_memory_mb", why is None, why or ("the CUDA allocator's peak" if dev.type == "cuda"
                                                               else "the process's resident high-water mark")))
    why = energy_unavailable(dev)
    checks.append(Check("energy_j", why is None, why or ("NVML" if dev.type == "cuda" else "RAPL counters")))
    info = {
        "autotune": __version__, "torch": torch.__version__, "optuna": optuna.__version__,
        "python": platform.python_version(), "platform": platform.platform(),
        "device": f"{dev} ({accel.device_name(dev)})",
        "cuda": torch.version.cuda or "none (CPU build)" if not torch.cuda.is_available()
        else f"{torch.version.cuda}, {torch.cuda.device_count()} GPU(s)",
        "cpu_cores": str(os.cpu_count()), "torch_threads": str(torch.get_num_threads()),
        "mkldnn": str(torch.backends.mkldnn.is_available()),
    }
    if dev.type == "cuda":
        cap = torch.cuda.get_device_capability(dev)
        info["compute_capability"] = f"{cap[0]}.{cap[1]} (TF32 and bf16 need >= 8.0)"
        info["memory"] = f"{torch.cuda.get_device_properties(dev).total_memory / 2**30:.1f} GiB"
    return {"info": info, "checks": checks}


def render(rep: dict[str, Any]) -> str:
    lines = [f"{k:>18}: {v}" for k, v in rep["info"].items()]
    lines.append("")
    for c in rep["checks"]:
        lines.append(f"{'ok' if c.ok else 'NO':>4}  {c.name:<16} {c.detail}")
    return "\n".join(lines)
