"""The stop rules that need only the trial: divergence and projected time."""

from __future__ import annotations

import math

import pytest

from autotune.core.errors import TrialStopped
from autotune.training.context import limits as stops


def test_divergence_rule() -> None:
    with pytest.raises(TrialStopped, match="diverged"):
        stops.check_divergence([1e9], 4.0, 1, 2.3)  # first epoch already far above chance
    with pytest.raises(TrialStopped, match="diverged"):
        stops.check_divergence([1.0, 5.0], 4.0, 2, 2.3)
    stops.check_divergence([2.0, 1.0], 4.0, 2, 2.3)
    # without a chance level (regression, a user's loss) the first epoch is the reference
    stops.check_divergence([100.0, 300.0], 4.0, 2)
    with pytest.raises(TrialStopped, match="first epoch's loss\\)"):
        stops.check_divergence([100.0, 500.0], 4.0, 2, math.inf)
    with pytest.raises(TrialStopped, match="non-finite"):
        stops.check_divergence([1.0, math.nan], 4.0, 2)


def test_slow_rule_projects_the_whole_run() -> None:
    stops.check_slow(2.0, 1, 5, None)  # no limit
    stops.check_slow(2.0, 1, 5, 10.0)  # 10 s projected: at the limit
    with pytest.raises(TrialStopped) as info:
        stops.check_slow(2.1, 1, 5, 10.0)
    assert info.value.reason == "slow" and info.value.epoch == 1
    assert stops.projected_time_s(3.0, 2, 10) == pytest.approx(15.0)
