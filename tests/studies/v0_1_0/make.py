"""How the stored studies in this folder were made (once, by autotune 0.1.0; kept for the record), and how a test
reads them.

    python tests/studies/v0_1_0/make.py

Into a SQLite file and a journal file, each: a small earlier study (`v0_1_0-earlier`, 2 trials) that the study
`v0_1_0` warm-starts from; then `v0_1_0` itself with the built-in trainer (complete trials, trials stopped by the
Pareto pruner, a recommended trial to export); then 3 more trials of it trained by a training function of the
user's (`fit` below) that reads only some settings (`not_applied`), trains at its own optimizer's rates times the
searched lr (`effective_lrs`), returns its objectives at the end (`pruning_off`) and raises on its first trial (a
FAIL with its error). Then what autotune 0.1.0 read from each (`read`, into `read.json`: every trial's
`TrialSummary`, the recommended trial, its export, the lines `autotune run` and `autotune best` print, and the
report's data), which the next releases must read the same (tests/test_stored_studies.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

import autotune
from autotune import config
from autotune.spec import RunConfig

HERE = Path(__file__).resolve().parent
FILES = {"sqlite": "study.sqlite3", "journal": "study.journal"}
SOURCE = "tests/studies/v0_1_0/study.yaml"  # the config's `source` as the reads name it (printed by `best`)

X = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] > 0).long()
CALLS = {"n": 0}


def fit(ctx: autotune.TrialContext) -> dict[str, float]:
    """A user's fit: its own SGD (lr 0.5 and 0.05 groups) that a searched lr multiplies; objectives returned at the
    end; raises on its first call; slow (0.1 s an epoch)."""
    CALLS["n"] += 1
    if CALLS["n"] == 1:
        raise ValueError("the user's fit failed on its first trial")
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    groups = [{"params": model[0].parameters(), "lr": 0.5}, {"params": model[2].parameters(), "lr": 0.05}]
    model, _ = ctx.prepare(model, torch.optim.SGD(groups, lr=0.5))
    for _ in ctx.epochs():
        time.sleep(0.1)  # slower than the built-in trainer's trials: off the front, so the recommended one is theirs
        for i in range(0, len(X), 64):
            ctx.backward(nn.functional.cross_entropy(model(X[i:i + 64]), Y[i:i + 64]), n_samples=64)
    with torch.no_grad():
        acc = float((model(X).argmax(1) == Y).float().mean())
    return {"val_accuracy": acc}


def config_for(url: str, **study: Any) -> RunConfig:
    """study.yaml with its storage at `url` (and other `study:` keys)."""
    raw = config.load(HERE / "study.yaml").to_dict()
    raw["study"] = {**raw["study"], "storage": url, **study}
    return config.from_dict(raw, source=SOURCE)


def copy(kind: str, folder: Path) -> str:
    """The stored study of this `kind` (sqlite, journal) copied into `folder`: its storage URL there."""
    path = Path(shutil.copy(HERE / FILES[kind], folder / FILES[kind]))
    return f"sqlite:///{path}" if kind == "sqlite" else f"journal://{path}"


def make(url: str) -> None:
    autotune.run(config_for(url, name="v0_1_0-earlier", n_trials=2, warm_start=None))
    cfg = config_for(url)
    autotune.run(cfg)
    CALLS["n"] = 0
    autotune.run(config_for(url, n_trials=(cfg.study.n_trials or 0) + 2), fit)


def _plain(x: object) -> object:
    """JSON's form of a value (NaN as a string, so the files compare as text)."""
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def read(url: str) -> Any:
    """What this release reads from the study at `url` (a copy: opening it may write): what the next ones must read
    the same."""
    from autotune.observe import TuneResult, export, progress, report_data
    from autotune.study import open_study

    cfg = config_for(url)
    result = TuneResult(study=open_study(cfg, create=False), config=cfg)
    best = result.best
    assert best is not None
    doc = export.best_yaml(cfg, best)
    del doc["study"]["storage"]  # (where the copy was opened)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # `autotune run`'s line per trial, then `autotune best`'s lines
        view = progress.RunView(cfg, plain=True)
        for t in result.study.get_trials(deepcopy=False):
            view.on_trial(result.study, t)
        progress.print_pareto(result)
        progress.print_best(result)
    data = report_data.build(result.study, cfg)
    del data["importances"]  # (fANOVA: a forest, not a reading of the records)
    return _plain({"trials": [dataclasses.asdict(s) for s in result.trials()], "best": best.number,
                   "lr_note": best.lr_note(), "export": doc, "printed": out.getvalue().splitlines(), "report": data})


if __name__ == "__main__":
    if len(sys.argv) > 1:  # one storage, in a process of its own (its SQLite connections closed at its end)
        make(sys.argv[1])
        sys.exit(0)
    for kind, name in FILES.items():
        (HERE / name).unlink(missing_ok=True)
        url = f"sqlite:///{HERE / name}" if kind == "sqlite" else f"journal://{HERE / name}"
        subprocess.run([sys.executable, __file__, url], check=True)
    conn = sqlite3.connect(HERE / FILES["sqlite"])  # everything in the one file (the study ran in WAL mode)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    with tempfile.TemporaryDirectory() as tmp:
        reads = {kind: read(copy(kind, Path(tmp))) for kind in FILES}
    (HERE / "read.json").write_text(json.dumps(reads, indent=1, sort_keys=True) + "\n")
    print(f"autotune {autotune.__version__}: wrote {', '.join(FILES.values())} and read.json in {HERE}")
