"""Where a learning curve is heading: a trial's final value of a per-epoch metric from its partial curve.

A saturating parametric fit (Domhan et al. 2015 use a family of them; two are enough here), least squares with
bounds: `exp` a - b*exp(-c*epoch) and `pow` a - b*epoch^-c, with b >= 0 (the curve improves towards a) and a
inside the metric's bounds ([0, 1] for an accuracy). The model with the smaller error wins; a fit that misses
the points by more than `max_rmse`, fails, or has too few points falls back to the last value (`fitted` False),
so a caller can tell a forecast from a copy. A minimized metric (a loss) is fitted negated.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


def _exp(e: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    return a - b * np.exp(-c * e)


def _pow(e: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    return a - b * np.power(e, -c)


MODELS: dict[str, tuple[Callable[..., np.ndarray], tuple[float, float]]] = {
    "exp": (_exp, (1e-3, 5.0)),  # the model and the bounds of its rate c
    "pow": (_pow, (1e-2, 4.0)),
}
MIN_POINTS = 3  # three parameters: fewer points fit any curve exactly and say nothing


@dataclass(frozen=True)
class Forecast:
    value: float  # the predicted value at the last epoch
    fitted: bool  # False: the last value, no fit to trust
    model: str = ""  # the winning model's name, "" when not fitted
    rmse: float = math.nan  # its root-mean-square error on the points


def forecast(curve: Sequence[float], total_epochs: int, *, maximize: bool = True, low: float = -math.inf,
             high: float = math.inf, max_rmse: float | None = None) -> Forecast:
    """The value `curve` (one entry per epoch, epoch 1 first) is heading for at epoch `total_epochs`, inside
    [low, high]. `max_rmse` (default 3% of the bounds' width, or of the curve's largest magnitude when
    unbounded) is the worst fit still trusted."""
    ys = [float(y) for y in curve]
    last = ys[-1] if ys else math.nan

    def clip(v: float) -> float:
        return min(high, max(low, v))

    if len(ys) < MIN_POINTS or not all(math.isfinite(y) for y in ys) or total_epochs <= len(ys):
        return Forecast(clip(last) if math.isfinite(last) else last, False)
    sign = 1.0 if maximize else -1.0  # fit an improving (rising) curve: a loss is negated
    y = np.asarray(ys) * sign
    lo, hi = (low, high) if maximize else (-high, -low)
    if max_rmse is None:
        width = high - low if math.isfinite(high - low) else max(abs(v) for v in ys)
        max_rmse = 0.03 * max(width, 1e-12)
    from scipy.optimize import OptimizeWarning, curve_fit  # (here: scipy.optimize is 0.45 s of every command's start)

    e = np.arange(1, len(ys) + 1, dtype=float)
    best: Forecast | None = None
    for name, (f, (c_lo, c_hi)) in MODELS.items():
        a0 = float(min(hi, max(lo, y.max() + 0.1 * (np.ptp(y) + 1e-6))))  # a little above the best so far
        b0 = max(a0 - float(y[0]), 1e-6)
        bounds = ([lo, 0.0, c_lo], [hi, np.inf, c_hi])  # (+-inf: unbounded)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)
                params, _ = curve_fit(f, e, y, p0=[a0, b0, 0.5], bounds=bounds, maxfev=2000)
        except (RuntimeError, ValueError):
            continue
        rmse = float(np.sqrt(np.mean((f(e, *params) - y) ** 2)))
        value = float(f(np.asarray([float(total_epochs)]), *params)[0]) * sign
        if math.isfinite(rmse) and math.isfinite(value) and rmse <= max_rmse and (best is None or rmse < best.rmse):
            best = Forecast(clip(value), True, name, rmse)
    return best if best is not None else Forecast(clip(last), False)


__all__ = ["MODELS", "Forecast", "forecast"]
