"""A recorded workload (bench/replay_record.py's file) and its surrogate: any point of the space -> a learning curve.

A point that was recorded answers with its own curve, exactly. Any other point answers with the curve of its
nearest recorded neighbour (1-nearest-neighbour, as Syne Tune's `add_surrogate` recommends for tabular
benchmarks): a real curve, never an average of several, so a replayed trial learns, diverges and costs what some
recorded configuration did. The distance: one-hot categoricals, numbers scaled to [0, 1] over their range (log
scale where the space says log), a parameter inactive in a point (momentum without sgd) its own value.

Times: each recorded epoch ends at `end_s` seconds (the recording's clock) after the configuration started; the
replay charges a trial the set-up before its first epoch (`setup_s`) and then each epoch's training plus
evaluation (`epoch_s`), and reports the recorded training time (`train_time_s`, evaluation left out).
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RECORDINGS = ROOT / "bench" / "recordings"


@dataclass(frozen=True)
class Curve:
    """One recorded configuration: its point, its epochs (metrics and clocks), and what stopped it early."""

    params: dict[str, Any]
    epochs: list[dict[str, float]]
    setup_s: float
    stop: dict[str, Any] | None = None

    def epoch_s(self, epoch: int) -> float:
        """Seconds epoch `epoch` (1-based) took, training and evaluation."""
        ends = [e["end_s"] for e in self.epochs]
        return ends[0] - self.setup_s if epoch == 1 else ends[epoch - 1] - ends[epoch - 2]

    def epoch_train_s(self, epoch: int) -> float:
        t = [e["train_time_s"] for e in self.epochs]
        return t[0] if epoch == 1 else t[epoch - 1] - t[epoch - 2]


@dataclass
class Workload:
    name: str
    space: dict[str, dict[str, Any]]  # the recorded space (epochs left out), as the header stores it
    max_epochs: int
    curves: list[Curve]
    header: dict[str, Any] = field(default_factory=dict)
    _x: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def load(cls, path: str | Path) -> Workload:
        path = Path(path)
        if not path.exists() and not path.suffix:
            path = RECORDINGS / f"{path}.jsonl.gz"
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            lines = [json.loads(line) for line in f if line.strip()]
        head, rows = lines[0], [r for r in lines[1:] if r.get("epochs")]
        name = Path(head["space_file"]).stem
        return cls(name, head["space"], int(head["max_epochs"]), setups(rows), head)

    # ---------------------------------------------------------------- the surrogate

    def features(self, params: Mapping[str, Any]) -> np.ndarray:
        out: list[float] = []
        for key, spec in self.space.items():
            value = params.get(key) if active(spec, params) else None
            if spec["type"] in ("categorical", "bool"):
                choices = spec.get("choices") or [False, True]
                out.extend(1.0 if value is not None and str(value) == str(c) else 0.0 for c in choices)
            else:
                out.extend(scaled(value, spec))
        return np.asarray(out, dtype=float)

    def _matrix(self) -> np.ndarray:
        if self._x is None:
            self._x = np.stack([self.features(c.params) for c in self.curves])
        return self._x

    def nearest(self, params: Mapping[str, Any]) -> Curve:
        """The recorded curve of `params`, or of its nearest recorded neighbour (ties: the earlier recording)."""
        d = ((self._matrix() - self.features(params)) ** 2).sum(axis=1)
        return self.curves[int(np.argmin(d))]

    @property
    def keys(self) -> list[str]:
        return list(self.space)


def active(spec: Mapping[str, Any], params: Mapping[str, Any]) -> bool:
    """The parameter's `when` holds for the point (a momentum is no part of an adam point, whatever it holds)."""
    for dep, want in (spec.get("when") or {}).items():
        if str(params.get(dep)) not in [str(w) for w in (want if isinstance(want, list) else [want])]:
            return False
    return True


def scaled(value: Any, spec: Mapping[str, Any]) -> list[float]:
    """(value scaled to [0, 1] over its range, 1) for a number; (0, 0) for a parameter the point does not have."""
    if value is None:
        return [0.0, 0.0]
    low, high = float(spec["low"]), float(spec["high"])
    v = min(max(float(value), low), high)
    if spec.get("log"):
        low, high, v = math.log(low), math.log(high), math.log(v)
    return [(v - low) / (high - low) if high > low else 0.0, 1.0]


def setups(rows: Sequence[dict[str, Any]]) -> list[Curve]:
    """Curves with their set-up time: before epoch 1, epoch 1 taken to last as long as epoch 2 (its first steps'
    one-time costs count as set-up). The very first configuration of a recording also loaded the data: a set-up
    over five times the median is replaced by the median (a study loads its data once per process too)."""
    raw = []
    for r in rows:
        ends = [e["end_s"] for e in r["epochs"]]
        second = ends[1] - ends[0] if len(ends) > 1 else ends[0] / 2
        raw.append(max(0.0, ends[0] - second))
    med = statistics.median(raw) if raw else 0.0
    return [Curve(r["params"], r["epochs"], s if s <= 5 * max(med, 1e-3) else med, r.get("stop"))
            for r, s in zip(rows, raw)]


__all__ = ["Curve", "RECORDINGS", "Workload", "active", "scaled", "setups"]
