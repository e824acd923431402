"""How the stored studies in this folder were made (run once, by autotune 0.1.0; kept for the record, not a test).

    python tests/studies/v0_1_0/make.py

Into a SQLite file and a journal file, each: a small earlier study (`v0_1_0-earlier`, 2 trials) that the study
`v0_1_0` warm-starts from; then `v0_1_0` itself with the built-in trainer (complete trials, trials stopped by the
Pareto pruner and by `vs_front`, a recommended trial to export); then 3 more trials of it trained by a training
function of the user's (`fit` below) that reads only some settings (`not_applied`), trains at its own optimizer's
rates times the searched lr (`effective_lrs`), reports its objectives only at the end (`pruning_off`) and raises
on its first trial (a FAIL with its error). Then what autotune 0.1.0 read from each (`read.json`: every trial's
`TrialSummary`, the recommended trial, its export, the progress line of each trial and the report's data), which the
next releases must read the same.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

import autotune  # noqa: E402
from autotune import config  # noqa: E402

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


def make(url: str) -> None:
    raw = config.load(HERE / "study.yaml").to_dict()
    raw["study"]["storage"] = url
    earlier = {**raw, "study": {**raw["study"], "name": "v0_1_0-earlier", "n_trials": 2, "warm_start": None}}
    autotune.run(config.from_dict(earlier, source=str(HERE / "study.yaml")))
    autotune.run(config.from_dict(raw, source=str(HERE / "study.yaml")))
    CALLS["n"] = 0
    more = {**raw, "study": {**raw["study"], "n_trials": raw["study"]["n_trials"] + 2}}
    autotune.run(config.from_dict(more, source=str(HERE / "study.yaml")), fit)


def _plain(x: object) -> object:
    """JSON's form of a value (NaN as a string, so the files compare as text)."""
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def read(url: str) -> dict[str, object]:
    """What this release reads from the study at `url`: what the next ones must read the same."""
    from autotune.observe import TuneResult, export, progress, report_data
    from autotune.study import open_study

    raw = config.load(HERE / "study.yaml").to_dict()
    raw["study"]["storage"] = url
    cfg = config.from_dict(raw, source=str(HERE / "study.yaml"))
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
    db, journal = HERE / "study.sqlite3", HERE / "study.journal"
    urls = {"sqlite": f"sqlite:///{db}", "journal": f"journal://{journal}"}
    if sys.argv[1:] == ["read"]:
        (HERE / "read.json").write_text(json.dumps({k: read(u) for k, u in urls.items()}, indent=1, sort_keys=True))
        sys.exit(0)
    if len(sys.argv) > 1:
        make(sys.argv[1])
        sys.exit(0)
    for path in (db, journal):
        path.unlink(missing_ok=True)
    for step in (*urls.values(), "read"):  # each in a process of its own: its SQLite connections closed at its end
        subprocess.run([sys.executable, __file__, step], check=True)
    conn = sqlite3.connect(db)  # everything in the one file (the study ran in WAL mode)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    print(f"autotune {autotune.__version__}: wrote {db.relative_to(ROOT)}, {journal.relative_to(ROOT)} and read.json")
