"""Helpers several test modules share (they import them from here, never from one another's test modules or from
conftest.py, which holds only fixtures): ROOT, processes running the `autotune` command, the workers' tiny study,
the examples, the dashboard, busy cores, a held journal lock, the built-in trainer's tiny digits study (`tiny`), a
user's training function's study, image and CIFAR-10 folders, the example ports' studies and one Lightning trial on a
bare context."""

from __future__ import annotations

import os
import pickle
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import optuna
import pytest
import torch
import yaml
from optuna.trial import TrialState

import autotune
from autotune import config
from autotune.core import contention
from autotune.core.contention import Share
from autotune.study import storage as storage_mod
from autotune.study import workers
from autotune.study.runner import open_study

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TINY = ROOT / "tests" / "studies" / "tiny_study.yaml"
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


# ---------------------------------------------------------------- the autotune command, a worker's study


def write_cfg(tmp_path: Path, storage: str, n_trials: int, name: str = "w", epochs: int = 1,
              study_extra: dict[str, Any] | None = None, single: bool = False, **train: Any) -> Path:
    """A tiny digits MLP study as a YAML file. `single`: one objective, no pruner (trials run to the end)."""
    raw: dict[str, Any] = {
        "study": {"name": name, "storage": storage, "n_trials": n_trials, "seed": 0, **(study_extra or {})},
        "data": {"name": "digits", "val_fraction": 0.2},
        "model": {"name": "mlp", "hidden": 32},
        "train": {"device": "cpu", "epochs": epochs, "data_fraction": 0.3, "batch_size": 64, **train},
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
                  "optimizer": {"type": "categorical", "choices": ["sgd", "adam"]}},
    }
    if single:
        raw["objectives"] = [{"metric": "val_accuracy"}]
        raw["pruning"] = {"pruner": "none"}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def env() -> dict[str, str]:
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.pop("AUTOTUNE_WORKER_INDEX", None)
    return e


def start_autotune(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """`autotune ARGS` started in `cwd` (its output piped; `finish` waits for it)."""
    return subprocess.Popen([sys.executable, "-m", "autotune", *args], cwd=cwd, env=env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(p: subprocess.Popen[str], timeout: float = 480) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def load(cfg_path: Path) -> optuna.Study:
    cfg = config.load(cfg_path)
    return optuna.load_study(study_name=cfg.study.name, storage=storage_mod.make_storage(cfg))


def wait_mid_trial(study: optuna.Study, epochs: int, timeout: float = 90) -> optuna.trial.FrozenTrial:
    """A RUNNING trial that has reported an epoch but not its last: the moment to kill its worker. (A running
    trial's user attrs are written when it ends; a one-objective study reports each epoch to Optuna.)"""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        for t in study.get_trials(states=(TrialState.RUNNING,)):
            if 1 <= len(t.intermediate_values) < epochs - 1 and workers.WORKER_ATTR in t.user_attrs:
                return t
        time.sleep(0.05)
    raise AssertionError("no trial was seen mid-way")


def assert_exact(study: optuna.Study, n: int) -> list[optuna.trial.FrozenTrial]:
    trials = study.get_trials()
    done = [t for t in trials if t.state in FINISHED and not t.user_attrs.get("surplus")]  # (a lost race: PRUNED)
    assert len(done) == n, [(t.number, t.state.name, t.user_attrs.get("surplus")) for t in trials]
    numbers = [t.number for t in trials]
    assert len(set(numbers)) == len(numbers)
    # Any FAIL is accounted for (a retried/killed trial; a lost race ends PRUNED as surplus); nothing stays RUNNING.
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    return done


def run_autotune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`autotune ARGS` run to its end in `cwd` (one torch thread), its output captured."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def fake_gpus(monkeypatch: pytest.MonkeyPatch, visible: str) -> list[str]:
    """This process believes it sees the GPUs of CUDA_VISIBLE_DEVICES=`visible`; any CUDA initialisation in it
    (torch.cuda.init, and _lazy_init, which moving a tensor to cuda also calls) is recorded and refused."""
    import torch

    ids = visible.split(",")
    calls: list[str] = []

    def refuse(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            calls.append(name)
            raise RuntimeError(f"test: {name} called in the driver")
        return call

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(ids))
    monkeypatch.setattr(torch.cuda, "_lazy_init", refuse("torch.cuda._lazy_init"))
    monkeypatch.setattr(torch.cuda, "init", refuse("torch.cuda.init"))
    return calls


# ---------------------------------------------------------------- the examples, the dashboard


def run_example(tmp_path: Path, name: str, n_trials: int, first: list[dict],
                **overrides: object) -> autotune.TuneResult:
    """examples/NAME.yaml, stored in tmp_path, its first trials `first`."""
    cfg = autotune.load_config(str(EXAMPLES / f"{name}.yaml"), overrides={
        "study.storage": f"sqlite:///{tmp_path}/{name}.db", "study.n_trials": n_trials, **overrides})
    study = open_study(cfg)
    for params in first:
        study.enqueue_trial(params)
    return autotune.run(cfg)


class Proc:
    """A subprocess whose stdout and stderr are collected by threads (so pipes never fill up)."""

    def __init__(self, *args: str) -> None:
        self.p = subprocess.Popen([sys.executable, "-m", "autotune", *args], cwd=ROOT, env=ENV, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out: list[str] = []
        self.err: list[str] = []
        self.lines: queue.Queue[str] = queue.Queue()
        for stream, sink in ((self.p.stdout, self.out), (self.p.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    def _pump(self, stream: IO[str] | None, sink: list[str]) -> None:
        assert stream is not None
        for line in stream:
            sink.append(line)
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                m = re.search(pattern, self.lines.get(timeout=0.5))
            except queue.Empty:
                if self.p.poll() is not None:
                    break
                continue
            if m:
                return m
        raise AssertionError(f"no {pattern!r} in time; stdout: {''.join(self.out)}\nstderr: {''.join(self.err)}")

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    @property
    def text(self) -> str:
        return "".join(self.out) + "".join(self.err)


def attrs_of(items: list[dict[str, str]]) -> dict[str, str]:
    return {a["key"]: a["value"] for a in items}


def start_dashboard(url: str) -> tuple[Proc, str]:
    dash = Proc("dashboard", str(TINY), "--storage", url, "--port", "0")
    m = dash.wait_for(r"optuna-dashboard at (http://127\.0\.0\.1:\d+)(/\S*)", timeout=90)
    return dash, m.group(1)


# ---------------------------------------------------------------- busy cores, a held journal lock


SPIN = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"


@contextmanager
def busy(seconds: float = 30.0, n: int | None = None) -> Iterator[None]:
    """`n` (default: one per core) Python processes spinning on the cores, bounded in time, always killed."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN.format(s=seconds)]) for _ in range(n or contention.cores())]
    try:
        time.sleep(0.3)  # scheduled and spinning
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def spin_share(seconds: float = 1.0, threads: int = 2) -> Share:
    """The share of the CPU a matmul loop on `threads` torch threads gets for `seconds`."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        w = contention.Window(threads)
        a = torch.randn(192, 192)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a @ a
        return w.share()
    finally:
        torch.set_num_threads(old)


HOLD = ("import sys, time; from autotune.study.journal_lock import OwnedJournalLock; "
        "OwnedJournalLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(120)")


def hold_in_child(path: Path) -> subprocess.Popen[str]:
    """A process that takes the journal's lock and keeps it (until it is killed)."""
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


# ---------------------------------------------------------------- the tiny digits study, a user's training function,
# image folders


def tiny(tmp_path: Path, **sections: Any) -> config.RunConfig:
    """A 2-objective digits study of a few 2-epoch trials, stored in tmp_path."""
    raw: dict[str, Any] = {
        "study": {"name": "t", "storage": f"sqlite:///{tmp_path}/t.db", "n_trials": 3, "seed": 0},
        "model": {"name": "cnn", "channels": [8, 16], "hidden": 32},
        "train": {"epochs": 2, "batch_size": 128},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    for key in raw.get("space", {}):  # a searched key is not also fixed
        raw["train"].pop(key, None)
    return config.from_dict(raw, source=str(tmp_path / "tiny.yaml"))


def user(tmp_path: Path, fit: str = "fit", **sections: Any) -> config.RunConfig:
    """A study of a user's training function from tests/user_fits.py, stored in tmp_path."""
    raw: dict[str, Any] = {
        "study": {"name": "u", "storage": f"sqlite:///{tmp_path}/u.db", "n_trials": 2, "seed": 0},
        "trainer": f"tests.user_fits:{fit}",
        "train": {"epochs": 2, "batch_size": 64, "lr": 2e-2},
    }
    for key, value in sections.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    for key in raw.get("space", {}):
        raw["train"].pop(key, None)
    return config.from_dict(raw, source=str(tmp_path / "user.yaml"))


COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (40, 50, 210)}


def write_folder(root: Path, n: int = 8, size: tuple[int, int] = (12, 12), gray: bool = False) -> Path:
    """One sub-folder per class of PNG files: a class colour plus noise (learnable, not trivial)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls, rgb in COLOURS.items():
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            px = np.clip(np.array(rgb) + rng.normal(0, 40, (*size[::-1], 3)), 0, 255).astype(np.uint8)
            img = Image.fromarray(px).convert("L") if gray else Image.fromarray(px)
            img.save(root / cls / f"{i:03d}.png")
    (root / "red" / "notes.txt").write_text("not an image: skipped")
    return root


def write_cifar10(root: Path, per_batch: int = 12) -> Path:
    """A CIFAR-10-format folder: five training batches of `per_batch` images and batches.meta."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for b in range(1, 6):
        labels = [int(v) for v in np.arange(per_batch) % 10]
        x = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        with open(folder / f"data_batch_{b}", "wb") as f:
            pickle.dump({b"batch_label": b"training batch", b"labels": labels, b"data": x}, f)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": names, b"num_vis": 3072}, f)
    return folder


def journal_study(tmp_path: Path) -> optuna.Study:
    """A study on a journal file in `tmp_path` (also from a subprocess: a "container" in the orphan tests)."""
    cfg = config.load(write_cfg(tmp_path, f"journal:///{tmp_path}/o.log", 3, name="o", single=True))
    return open_study(cfg)


# ---------------------------------------------------------------- the ports of public examples, one Lightning trial


def example_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, first: list[dict[str, Any]],
                  **overrides: Any) -> autotune.TuneResult:
    """A study of examples/NAME.yaml run in tmp_path, its first trials enqueued with the points in `first`."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.chdir(tmp_path)
    cfg = autotune.load_config(str(EXAMPLES / f"{name}.yaml"), overrides={
        "study.storage": f"sqlite:///{tmp_path}/{name}.db", "study.n_trials": len(first), **overrides})
    study = open_study(cfg)
    for params in first:
        study.enqueue_trial(params)
    return autotune.run(cfg)


def plain_example(example: str, code: str, cwd: Path) -> float:
    """The last line an example script (examples/EXAMPLE.py, imported as s) prints after `code`, as a number."""
    done = subprocess.run([sys.executable, "-c", f"import {example} as s\n{code}"], capture_output=True, text=True,
                          cwd=cwd, timeout=900, env={"PYTHONPATH": f"{ROOT}:{EXAMPLES}", "OMP_NUM_THREADS": "1",
                                                     "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.strip().splitlines()[-1])


def lightning_trial(fit: Any = None, searched: tuple[str, ...] = (), user: dict[str, Any] | None = None,
                    setup: dict[str, Any] | None = None, **settings: Any) -> Any:
    """One trial of `fit` (tests/integrations_tests/lightning_fits.py's `fit` unless given) on a bare context (the
    runner's plumbing left out): its TrainResult. The settings given (and epochs, 2 unless given) are the trial's
    chosen ones; every other one is the module's and loaders' own."""
    from autotune.spec.settings import DEFAULTS
    from autotune.training import TrainingPlan, TrialContext, run_fit, trial_session
    from tests.integrations_tests import lightning_fits  # (imports Lightning: only where a test asks)

    fit = lightning_fits.fit if fit is None else fit
    values = {**DEFAULTS, "device": "cpu", "epochs": 2, **settings}
    wiring = {k: v for k, v in (setup or {}).items() if k in ("on_epoch", "on_record", "probe")}  # (the runner's)
    plan = TrainingPlan.bare(values, user=user, searched=searched or tuple(settings), fixed=("epochs",),
                             **{k: v for k, v in (setup or {}).items() if k not in wiring})
    ctx = TrialContext(plan, **wiring)
    with trial_session(values):
        return run_fit(fit, ctx)
