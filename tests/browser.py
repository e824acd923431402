"""Headless Chromium for the slow screenshot tests (Debian's `chromium` package)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1000"]


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return exe


def run(url: str, tmp: Path, *extra: str, wait_ms: int = 8000, timeout: float = 120) -> subprocess.CompletedProcess:
    """Chromium on `url`, with `wait_ms` of page time for scripts and API calls before it acts."""
    profile = tmp / f"chromium-profile-{len(list(tmp.glob('chromium-profile-*')))}"
    cmd = [chromium(), *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={wait_ms}",
           "--enable-logging=stderr", "--v=0", *extra, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def screenshot(url: str, out: Path, tmp: Path, wait_ms: int = 8000) -> subprocess.CompletedProcess:
    proc = run(url, tmp, f"--screenshot={out}", wait_ms=wait_ms)
    assert out.is_file() and out.stat().st_size > 10_000, proc.stderr[-2000:]
    keep = os.environ.get("AUTOTUNE_SCREENSHOT_DIR")  # set it to keep the pictures, e.g. docs/screenshots
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(keep) / out.name)
    return proc


def console_errors(stderr: str) -> list[str]:
    """Page-script errors Chromium logged: its CONSOLE lines (every level is logged as INFO) that name an error."""
    return [line for line in stderr.splitlines()
            if ":CONSOLE" in line and ("Uncaught" in line or "Error" in line or "error" in line)]
