"""What the search strategy may spend: its own CPU time as a share of the trials' time, and cost cooling.

A strategy pays for itself only where its own time is small beside the trials': on trials of minutes a forest refit
per trial is a rounding error, on sub-second trials it is most of the run. `Meter` keeps the sampler's measured CPU
seconds (thread time: the forest, the candidates, the inner sampler, the study reads) against the seconds of the
trials it proposed (their `train_time_s`, else their duration), and gives the costliest mode whose last measured
price fits in what is left of CAP_SHARE x the trials' time: `choose` (the predicted front's candidates), `inner` (the
inner sampler's own proposal: TPE), `random` (nearly free). A mode not measured yet is priced at PRIOR_S.

Cost cooling (NePS's cost-cooling acquisition; CArBO; EI per unit cost): a candidate's hypervolume gain is divided by
its predicted training time raised to `alpha`, which cools from 1 towards 0 as the budget is spent (the share of a
known budget left, and at most COOL_TRIALS / (COOL_TRIALS + trials finished)), so cheap configurations come first and
the expensive ones a front's accurate end needs follow once the cheap end is known.
"""

from __future__ import annotations

import numpy as np

CAP_SHARE = 0.05  # the strategy's CPU time, at most this share of the trials' time (`candidates: auto`)
MODES = ("choose", "inner", "random")  # costliest first
PRIOR_S = {"choose": 0.1, "inner": 0.005, "random": 0.0}  # a mode's price before it was measured here
COOL_TRIALS = 30.0  # cost cooling: alpha <= COOL_TRIALS / (COOL_TRIALS + finished trials)
HEADROOM = 2.0  # a mode runs where this many times its last price fits (a price grows with the trials, and varies)
BIG_BUDGET = 10_000  # n_trials at or above this is no budget (a run bounded by time or by hand)


class Meter:
    """The strategy's CPU seconds against the trials' seconds, and the mode each trial can afford."""

    def __init__(self, cap: float = CAP_SHARE) -> None:
        self.cap = cap
        self.spent_s = 0.0  # the strategy's CPU seconds so far
        self.trial_s = 0.0  # the seconds of the finished trials this process proposed
        self.price_s = dict(PRIOR_S)  # each mode's last measured CPU seconds for one trial
        self.used: dict[str, int] = dict.fromkeys(MODES, 0)

    def share(self) -> float:
        return self.spent_s / self.trial_s if self.trial_s > 0 else 0.0

    def mode(self) -> str:
        """The costliest mode whose price (x HEADROOM) fits in what is left of cap x the trials' time."""
        left = self.cap * self.trial_s - self.spent_s
        for m in MODES:
            if HEADROOM * self.price_s[m] <= left or m == MODES[-1]:
                return m
        return MODES[-1]  # (unreachable)

    def charge(self, mode: str, seconds: float) -> None:
        """One trial's proposal in `mode` cost `seconds` of CPU."""
        self.spent_s += seconds
        self.price_s[mode] = seconds
        self.used[mode] += 1

    def trial_done(self, seconds: float) -> None:
        self.trial_s += max(0.0, seconds)


def alpha(finished: int, budget_used: float | None) -> float:
    """The cost exponent: 1 at the start, cooling with the trials finished and the share of a known budget used."""
    a = COOL_TRIALS / (COOL_TRIALS + max(0, finished))
    if budget_used is not None:
        a = min(a, max(0.0, 1.0 - budget_used))
    return a


def per_cost(gains: np.ndarray, costs: np.ndarray, a: float) -> np.ndarray:
    """Gain per predicted second^a (costs relative to their median: only the ratios matter)."""
    c = np.maximum(costs, 1e-12)
    return gains / (c / float(np.median(c))) ** a


__all__ = ["CAP_SHARE", "COOL_TRIALS", "MODES", "PRIOR_S", "Meter", "alpha", "per_cost"]
