"""Learning-curve forecasts: synthetic curves whose end is known."""

from __future__ import annotations

import math
import random

import pytest

from autotune.search.curves import forecast


@pytest.mark.parametrize("shape", ["exp", "pow"])
def test_forecast_at_epoch_4_of_20_lands_near_the_true_end(shape: str) -> None:
    true = (lambda e: 0.95 - 0.6 * math.exp(-0.4 * e)) if shape == "exp" else (lambda e: 0.9 - 0.5 * e ** -0.8)
    rng = random.Random(1)
    curve = [true(e) + rng.uniform(-0.003, 0.003) for e in range(1, 5)]
    f = forecast(curve, 20, low=0.0, high=1.0)
    assert f.fitted
    assert abs(f.value - true(20)) < 0.03, (f, true(20))
    assert f.value > curve[-1] + 0.05  # heading well above where it is now: not the last value


def test_a_noisy_flat_curve_predicts_its_level() -> None:
    rng = random.Random(0)
    curve = [0.7 + rng.uniform(-0.01, 0.01) for _ in range(6)]
    f = forecast(curve, 20, low=0.0, high=1.0)
    assert abs(f.value - 0.7) < 0.02


def test_a_diverging_curve_stays_inside_the_bounds_and_falls_back_to_its_last_value() -> None:
    f = forecast([0.9, 0.8, 0.6, 0.4, 0.1], 20, low=0.0, high=1.0)
    assert not f.fitted and f.value == 0.1
    steep = forecast([0.5, 0.9, 0.99, 1.0], 20, low=0.0, high=1.0)  # heading past 1: capped
    assert 0.99 <= steep.value <= 1.0


def test_too_few_points_or_the_last_epoch_give_the_last_value() -> None:
    assert not forecast([0.3, 0.5], 20).fitted and forecast([0.3, 0.5], 20).value == 0.5
    assert not forecast([0.3, 0.5, 0.6], 3).fitted


def test_a_minimized_loss_is_forecast_falling_and_never_below_its_bound() -> None:
    true = lambda e: 0.4 + 1.6 * math.exp(-0.5 * e)  # noqa: E731
    f = forecast([true(e) for e in range(1, 6)], 30, maximize=False, low=0.0)
    assert f.fitted and abs(f.value - true(30)) < 0.02
    assert forecast([3.0, 1.0, 0.2, 0.01], 30, maximize=False, low=0.0).value >= 0.0
