"""YAHPO Gym's LCBench surrogate as a replay workload: any configuration of LCBench's space, on any of its 34
OpenML tasks, answers with a learning curve (validation accuracy, cumulative seconds) from the ONNX surrogate in
bench/yahpo_lcbench/ (its README: source, licenses, citation, encoding).

LCBench's epoch 1 is an untrained network: YAHPO Gym's FAQ says the first epoch of the lcbench data is the model
"only being initialized (i.e., not trained)" and advises starting multi-fidelity HPO at epoch 2. Every arm's
workload therefore starts there: the replay's epoch k is the surrogate's epoch k + 1 (FIRST_EPOCH), so a
configuration has EPOCHS = 51 fidelities, the first one trained, and its end (the surrogate's epoch 52, the
reference fronts' epoch) unchanged. The untrained epoch's seconds stay in the cumulative time (the surrogate's time
at epoch 2 is what the first replayed epoch costs).

`Surrogate` reads the model with onnxruntime (one thread), encoding a configuration as YAHPO Gym's
`BenchmarkSet.objective_function` does: the task's integer code (encoding.json) as `x_cat`; epoch, batch_size,
learning_rate, momentum, weight_decay, num_layers, max_units, max_dropout as raw float32 values in `x_cont`. All 52
epochs of a configuration are one batched call, cached.

`LCBench(task)` is a `Workload` for the replay (bench/replay_backend.py, bench/replay_syne.py): `nearest(point)`
answers with the surrogate's own curve for that exact point (no neighbour: the surrogate is defined everywhere).
The replay charges each epoch the surrogate's time for it and reports the cumulative time as the training time.
Two repairs, both said where the tables are: the surrogate's cumulative time is made non-decreasing (a running
maximum: on task 146212 about 8 % of its epoch-to-epoch steps go backwards, elsewhere under 0.2 %), and the
accuracy is a fraction (the surrogate answers percent). `samples_per_s`, which only the speed probe reads, is a
nominal 10,000 samples per epoch over the epoch's time (LCBench records no sample counts).

    python bench/replay_lcbench.py --fronts     # (re)make bench/yahpo_lcbench/fronts.json (about a minute)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.replay_workload import Curve  # noqa: E402

DIR = Path(__file__).resolve().parent / "yahpo_lcbench"
SPACE_FILE = "bench/yahpo_lcbench/lcbench.yaml"
SURROGATE_EPOCHS = 52  # the surrogate answers epochs 1-52
FIRST_EPOCH = 2  # epoch 1 is the untrained network (YAHPO Gym's FAQ): every arm's first fidelity is epoch 2
EPOCHS = SURROGATE_EPOCHS - FIRST_EPOCH + 1  # the replay's epochs: 51, the last one the surrogate's 52
# autotune's setting -> YAHPO Gym's name (bench/yahpo_lcbench/lcbench.yaml's space)
NAMES = {"batch_size": "batch_size", "lr": "learning_rate", "momentum": "momentum", "weight_decay": "weight_decay",
         "model.depth": "num_layers", "model.hidden": "max_units", "dropout": "max_dropout"}
CONT = ("epoch", "batch_size", "learning_rate", "momentum", "weight_decay", "num_layers", "max_units", "max_dropout")
OUTPUTS = ("time", "val_accuracy", "val_cross_entropy", "val_balanced_accuracy", "test_cross_entropy",
           "test_balanced_accuracy")
NOMINAL_SAMPLES = 10_000  # per epoch, for samples_per_s (the speed probe's reading) only


def config_space() -> dict[str, Any]:
    return json.loads((DIR / "config_space.json").read_text())


def tasks() -> list[str]:
    """The 34 OpenML task ids, in config_space.json's order."""
    hp = next(h for h in config_space()["hyperparameters"] if h["name"] == "OpenML_task_id")
    return [str(c) for c in hp["choices"]]


def space() -> dict[str, dict[str, Any]]:
    """LCBench's 7 hyper-parameters in the replay's space format, under autotune's names (epochs left out)."""
    by = {h["name"]: h for h in config_space()["hyperparameters"]}
    out: dict[str, dict[str, Any]] = {}
    for ours, theirs in NAMES.items():
        h = by[theirs]
        kind = "int" if h["type"] == "uniform_int" else "float"
        high = float(h["upper"])
        if ours == "dropout":
            high = 0.999  # autotune's dropout must be < 1 (lcbench.yaml): the space every arm searches
        out[ours] = {"type": kind, "low": float(h["lower"]), "high": high, "log": bool(h["log"])}
    return out


class Surrogate:
    """The ONNX model, one thread, queried in batches."""

    def __init__(self, path: Path = DIR / "model.onnx") -> None:
        import onnxruntime as rt

        opts = rt.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self.session = rt.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]  # x_cat, x_cont (YAHPO Gym's order)
        self.codes = json.loads((DIR / "encoding.json").read_text())["OpenML_task_id"]

    def encode(self, rows: Sequence[Mapping[str, float]], task: str) -> tuple[np.ndarray, np.ndarray]:
        """YAHPO names (with `epoch`) -> (x_cat, x_cont) as BenchmarkSet._config_to_xs builds them."""
        x_cat = np.full((len(rows), 1), self.codes[str(task)], dtype=np.int32)
        x_cont = np.array([[float(r[k]) for k in CONT] for r in rows], dtype=np.float32)
        return x_cat, x_cont

    def query(self, rows: Sequence[Mapping[str, float]], task: str) -> np.ndarray:
        """The surrogate's raw answers, one row of OUTPUTS per input row."""
        x_cat, x_cont = self.encode(rows, task)
        return self.query_x(x_cat, x_cont)

    def query_x(self, x_cat: np.ndarray, x_cont: np.ndarray) -> np.ndarray:
        return np.asarray(self.session.run(None, {self.inputs[0]: x_cat, self.inputs[1]: x_cont})[0], dtype=float)

    def curve(self, config: Mapping[str, float], task: str) -> np.ndarray:
        """All SURROGATE_EPOCHS epochs of a configuration (YAHPO names, no epoch), the untrained first one
        included: rows of OUTPUTS, one call."""
        return self.query([{**config, "epoch": e} for e in range(1, SURROGATE_EPOCHS + 1)], task)


@cache
def surrogate() -> Surrogate:
    return Surrogate()


def yahpo_config(point: Mapping[str, Any]) -> dict[str, float]:
    """autotune's settings -> YAHPO Gym's configuration (integers as integers)."""
    sp = space()
    out: dict[str, float] = {}
    for ours, theirs in NAMES.items():
        v = float(point[ours])
        out[theirs] = float(round(v)) if sp[ours]["type"] == "int" else v
    return out


def curve_of(raw: np.ndarray, config: Mapping[str, Any]) -> Curve:
    """The surrogate's rows (epochs 1-52) -> a replay `Curve` of epochs FIRST_EPOCH-52 (the untrained epoch 1
    dropped, its seconds kept in the cumulative time): time made non-decreasing, accuracy a fraction."""
    times = np.maximum.accumulate(np.maximum(raw[:, 0], 0.0))
    epochs = []
    for e in range(FIRST_EPOCH - 1, len(raw)):
        step = times[e] - (times[e - 1] if e else 0.0)
        epochs.append({"val_accuracy": float(raw[e, 1]) / 100.0, "val_loss": float(raw[e, 2]),
                       "train_time_s": float(times[e]), "end_s": float(times[e]),
                       "samples_per_s": NOMINAL_SAMPLES / max(step, 1e-6)})
    return Curve(dict(config), epochs, setup_s=0.0)


@dataclass
class LCBench:
    """One LCBench task as a replay `Workload` (the attributes bench/replay_backend.py and replay_syne.py read)."""

    task: str
    space: dict[str, dict[str, Any]] = field(default_factory=space)
    max_epochs: int = EPOCHS
    curves: list[Curve] = field(default_factory=list)  # none recorded: every point is answered by the surrogate
    _cache: dict[tuple[float, ...], Curve] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return f"lcbench-{self.task}"

    @property
    def header(self) -> dict[str, Any]:
        return {"machine": {"cpu": "YAHPO Gym surrogate"}, "clock": "surrogate seconds"}

    @property
    def keys(self) -> list[str]:
        return list(self.space)

    def nearest(self, params: Mapping[str, Any]) -> Curve:
        """The surrogate's curve of `params` (autotune's names; anything else in it is ignored), cached."""
        config = yahpo_config(params)
        key = tuple(config[n] for n in CONT[1:])
        if key not in self._cache:
            self._cache[key] = curve_of(surrogate().curve(config, self.task), config)
        return self._cache[key]


# ---------------------------------------------------------------- the fixed reference: the surrogate's own front


def random_configs(n: int, rng: np.random.Generator) -> np.ndarray:
    """n configurations drawn as the space samples them (log-uniform where log), YAHPO's CONT[1:] order."""
    sp = space()
    cols = []
    for ours in NAMES:
        s = sp[ours]
        lo, hi = s["low"], s["high"]
        if s["type"] == "int":
            lo, hi = lo - 0.5 + 1e-9, hi + 0.5 - 1e-9
        u = rng.uniform(math.log(lo), math.log(hi), n) if s["log"] else rng.uniform(lo, hi, n)
        v = np.exp(u) if s["log"] else u
        cols.append(np.clip(np.round(v), s["low"], s["high"]) if s["type"] == "int" else v)
    return np.stack(cols, axis=1)


def final_points(sur: Surrogate, task: str, x: np.ndarray) -> np.ndarray:
    """(time, accuracy fraction) after the last epoch of each configuration row, by the same repairs as curve_of
    (the running maximum of time needs every epoch: computed in chunks)."""
    out = []
    for chunk in np.array_split(x, max(1, len(x) // 2000)):
        rows = np.concatenate([np.column_stack([np.full(len(chunk), e), chunk])
                               for e in range(1, SURROGATE_EPOCHS + 1)])
        raw = sur.query_x(np.full((len(rows), 1), sur.codes[task], dtype=np.int32), rows.astype(np.float32))
        raw = raw.reshape(SURROGATE_EPOCHS, len(chunk), len(OUTPUTS))
        t = np.maximum.accumulate(np.maximum(raw[:, :, 0], 0.0), axis=0)[-1]
        out.append(np.column_stack([t, raw[-1, :, 1] / 100.0]))
    return np.concatenate(out)


def front_2d(points: np.ndarray) -> np.ndarray:
    """Non-dominated (time down, accuracy up) rows, by time."""
    order = np.lexsort((-points[:, 1], points[:, 0]))
    best, keep = -math.inf, []
    for i in order:
        if points[i, 1] > best:
            keep.append(i)
            best = points[i, 1]
    return points[keep]


REFERENCE_RANDOM = 2_000  # the reference front: that of this many random configurations (LCBench's own design)


def reference_front(task: str, n_random: int = 10_000, rounds: int = 2, per_round: int = 2_500,
                    seed: int = 0) -> dict[str, Any]:
    """A task's fixed reference, the same for every arm: `n_random` random configurations (seed `seed`) trained 52
    epochs; the median of their times is the budget's unit (`median_time_s`), the front of the first
    REFERENCE_RANDOM of them is the reference front (`front`): LCBench itself is 2,000 random configurations per
    task, and 90 % of that front is what a search of tens of trials can be asked to reach. `front_local_search`, kept
    to show why it is not the reference: that front after `rounds` of `per_round` perturbations of its
    configurations (a local search of the surrogate's extreme corners, which no arm reaches in the budget)."""
    sur, rng = surrogate(), np.random.default_rng(seed)
    x = random_configs(n_random, rng)
    pts = final_points(sur, task, x)
    median_s = float(np.median(pts[:, 0]))
    reference = front_2d(pts[:REFERENCE_RANDOM])
    sp = [space()[k] for k in NAMES]
    for _ in range(rounds):
        f = front_2d(np.column_stack([pts, np.arange(len(pts))]))
        parents = x[f[:, 2].astype(int)]
        kids = parents[rng.integers(0, len(parents), per_round)].copy()
        for j, s in enumerate(sp):
            lo, hi = s["low"], s["high"]
            if s["log"]:
                kids[:, j] = np.exp(np.log(kids[:, j]) + rng.normal(0, 0.1 * math.log(hi / lo), per_round))
            else:
                kids[:, j] = kids[:, j] + rng.normal(0, 0.1 * (hi - lo), per_round)
            kids[:, j] = np.clip(np.round(kids[:, j]) if s["type"] == "int" else kids[:, j], lo, hi)
        x = np.concatenate([x, kids])
        pts = np.concatenate([pts, final_points(sur, task, kids)])

    def shown(f: np.ndarray) -> list[list[float]]:
        return [[round(float(t), 4), round(float(a), 6)] for t, a in f]

    return {"front": shown(reference), "median_time_s": round(median_s, 3), "random": REFERENCE_RANDOM,
            "front_local_search": shown(front_2d(pts)), "evaluated": int(len(pts))}


def fronts() -> dict[str, Any]:
    path = DIR / "fronts.json"
    return json.loads(path.read_text())["tasks"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fronts", action="store_true", help="(re)make bench/yahpo_lcbench/fronts.json")
    args = ap.parse_args()
    if args.fronts:
        out = {}
        for t in tasks():
            out[t] = reference_front(t)
            print(t, len(out[t]["front"]), "front points; median 52-epoch time", out[t]["median_time_s"], flush=True)
        (DIR / "fronts.json").write_text(json.dumps({
            "made_by": "python bench/replay_lcbench.py --fronts (reference_front, seed 0: 10,000 random configurations "
                       "give median_time_s; the front of the first 2,000 is the reference, front; front_local_search: "
                       "the front after 2 rounds of 2,500 perturbations of its configurations, not used)",
            "tasks": out}, indent=0))


if __name__ == "__main__":
    main()


__all__ = ["EPOCHS", "FIRST_EPOCH", "LCBench", "NAMES", "REFERENCE_RANDOM", "SURROGATE_EPOCHS", "Surrogate", "curve_of",
           "fronts", "reference_front",
           "space", "surrogate", "tasks", "yahpo_config"]
