"""Interrupts that cannot be lost, in a library host's own process (real processes, real signals): a fit that
swallows every exception while it iterates its training loader still ends on SIGTERM within the watchdog's grace;
a host's own `sys.exit` in its SIGTERM handler is the host's exit, never the trial's error; SIGTERM with the
default handler ends the host as SIGTERM does (143), after the trial is recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest

from autotune.core import watchdog

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}

FITS = '''
import time
from pathlib import Path
from torch import nn
from tests.user_fits import MLP, X, Y, accuracy


def swallows_in_its_loader_loop(ctx):
    """Skips a batch whatever goes wrong in it, stepping its own optimizer: nothing of the context is called
    inside the epoch but the loader's iteration (epochs of ~20 s)."""
    model, opt = ctx.prepare(MLP())
    train = ctx.loader((X, Y), batch_size=8)
    for _ in ctx.epochs():
        for x, y in train:
            Path(__file__).with_suffix(".inloop").touch()  # (the host's SIGTERM comes once the loop runs)
            try:
                time.sleep(0.25)
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
            except BaseException:
                pass
        acc, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)
'''

HOST = '''
import os, signal, sys, threading, time
sys.path.insert(0, {root!r}); sys.path.insert(0, {tmp!r})
import autotune
from autotune import config
{handler}
cfg = config.from_dict({{"study": {{"name": "g", "storage": "sqlite:///{tmp}/g.db", "n_trials": 3}},
                        "trainer": "fits50:{fit}", "train": {{"epochs": 3, "batch_size": 8}}}},
                       source="{tmp}/g.yaml")


def terminate_mid_trial():  # what Kubernetes does to the service, once a trial trains in its swallowing loop
    # (not sooner: the first trial's imports, torch's compiler stack, take seconds under load, and an interrupt
    # never lands inside an import: it waits for the import's end)
    while not os.path.exists("{tmp}/fits50.inloop"):
        time.sleep(0.1)
    time.sleep(1.0)
    print("SIGTERM at", time.monotonic(), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)


threading.Thread(target=terminate_mid_trial, daemon=True).start()
try:
    autotune.run(cfg)
    print("run returned", flush=True)
except BaseException as e:
    print("run raised", type(e).__name__, e, flush=True)
    raise
'''


def host(tmp_path: Path, fit: str, handler: str = "") -> tuple[subprocess.CompletedProcess[str], float]:
    """A host program calling autotune.run, sent SIGTERM 1 s after its first trial's fit entered its loader loop;
    returns it and the seconds from the signal to the process's end."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "fits50.py").write_text(FITS)
    script = tmp_path / "host.py"
    script.write_text(HOST.format(root=str(ROOT), tmp=str(tmp_path), fit=fit, handler=textwrap.dedent(handler)))
    r = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=ENV, capture_output=True, text=True,
                       timeout=240)
    end = time.monotonic()
    sent = [float(line.split()[-1]) for line in r.stdout.splitlines() if line.startswith("SIGTERM at")]
    assert sent, (r.stdout, r.stderr)
    return r, end - sent[0]


def trials(tmp_path: Path) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="g", storage=f"sqlite:///{tmp_path}/g.db").trials


def check_swallowing_host_ends_within_the_grace(tmp_path: Path) -> None:
    r, took = host(tmp_path, "swallows_in_its_loader_loop")
    assert r.returncode == -signal.SIGTERM, (r.returncode, r.stdout, r.stderr[-3000:])  # as SIGTERM ends it
    assert took < watchdog.GRACE_S, (took, r.stderr[-3000:])
    assert "run r" not in r.stdout  # (ended by the signal, sent again once the run recorded its trial)
    (t,) = trials(tmp_path)
    assert t.state.name == "FAIL" and t.user_attrs["stop_reason"] == "interrupted", t.user_attrs


def test_a_fit_swallowing_in_its_loader_loop_ends_on_sigterm_within_the_grace(tmp_path: Path) -> None:
    """Issue 50 item 2 (before: the fit trained on to its epoch's end, the host could only be SIGKILLed when
    epochs were long) and item 5 (before: exit 0/130 after a KeyboardInterrupt, not SIGTERM's 143)."""
    check_swallowing_host_ends_within_the_grace(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("loaded", [False, True], ids=["quiet", "under-load"])
def test_ten_swallowing_hosts_end_within_the_grace(tmp_path: Path, loaded: bool) -> None:
    from tests.support import busy

    for i in range(10):
        if loaded:
            with busy(seconds=90, n=2):
                check_swallowing_host_ends_within_the_grace(tmp_path / str(i))
        else:
            check_swallowing_host_ends_within_the_grace(tmp_path / str(i))


def test_a_hosts_own_sys_exit_in_its_sigterm_handler_is_the_hosts_exit(tmp_path: Path) -> None:
    """Issue 50 item 5: the host's handler calls sys.exit(143): SystemExit(143) reaches the host (its exit code),
    the trial is recorded as stopped by the host (interrupted), not as an error of its settings (before: the
    trial failed with SystemExit as its error and the host got KeyboardInterrupt)."""
    r, took = host(tmp_path, "swallows_in_its_loader_loop", handler="""
        def on_term(signum, frame):
            print("host handler", flush=True)
            sys.exit(143)
        signal.signal(signal.SIGTERM, on_term)
    """)
    assert r.returncode == 143, (r.returncode, r.stdout, r.stderr[-3000:])
    assert "host handler" in r.stdout and "run raised SystemExit 143" in r.stdout, r.stdout
    assert took < watchdog.GRACE_S
    (t,) = trials(tmp_path)
    assert t.state.name == "FAIL" and t.user_attrs["stop_reason"] == "interrupted", t.user_attrs
    assert "interrupted (SIGTERM: the host's handler raised SystemExit(143))" in t.user_attrs["error"], t.user_attrs
