"""Rungs where ranks carry information: which epochs a successive-halving pruner may cut at, learned from the study.

A fixed first rung at epoch 1 is a coin flip wherever the first epoch says little about the last: a warm-up, a
cosine or one-cycle schedule, a large first-epoch start-up, or LCBench's epoch 1 (an untrained network; YAHPO Gym
advises epochs 2-51). As Syne Tune's PASHA decides how far to train from whether the rankings at consecutive rungs
agree, `LearnedRungs` measures, over the trials (finished, and other workers' running ones so far), how well the
quality ranks at an epoch r agree with the ranks at the next rung (r x eta, or the last epoch): Spearman's rank
correlation. A rung is *proven* when at least
`min_trials` trials reached its next rung and the correlation is at least `min_agreement` with its lower one-sigma
bound (Fisher's z) above zero. The first rung is the smallest proven r; the ladder r, r x eta, ... cuts only at its
proven rungs. Until then nothing is cut: the first trials run on, and their curves are the evidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_AGREEMENT = 0.5  # Spearman's rho between a rung's ranks and the next rung's, at least
MIN_TRIALS = 6  # trials that reached the next rung before a rung is judged at all


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); 0 where either side is constant."""
    ra, rb = _ranks(np.asarray(a, dtype=float)), _ranks(np.asarray(b, dtype=float))
    sa, sb = ra.std(), rb.std()
    if sa == 0 or sb == 0:
        return 0.0
    return float(((ra - ra.mean()) * (rb - rb.mean())).mean() / (sa * sb))


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    xs, ranks = x[order], np.empty(len(x))
    i = 0
    while i < len(x):  # a run of equal values shares its average rank
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2
        i = j + 1
    return ranks


@dataclass(frozen=True)
class Agreement:
    rung: int  # the epoch judged
    versus: int  # the epoch it is compared with (the next rung, or the last epoch)
    rho: float
    trials: int  # trials with both epochs

    def proven(self, min_agreement: float = MIN_AGREEMENT, min_trials: int = MIN_TRIALS) -> bool:
        if self.trials < max(min_trials, 4) or self.rho < min_agreement:
            return False
        low = math.tanh(math.atanh(min(self.rho, 0.999999)) - 1.0 / math.sqrt(self.trials - 3))
        return low > 0.0


class LearnedRungs:
    """The rungs of a successive-halving ladder with reduction `eta`, learned from the trials' curves (so far) of
    one quality objective (`curves`: per trial, its quality after each epoch, higher better)."""

    def __init__(self, eta: int, min_agreement: float = MIN_AGREEMENT, min_trials: int = MIN_TRIALS) -> None:
        self.eta = eta
        self.min_agreement = min_agreement
        self.min_trials = min_trials
        self._key: tuple[int, int, int] | None = None  # (curves, their epochs, epochs): what `_table` is for
        self._table: dict[int, Agreement] = {}
        self.ladder: list[int] = []  # the learned ladder's cutting rungs for the epochs last asked about

    def candidates(self, epochs: int) -> list[int]:
        """The first rungs considered: every epoch up to epochs / eta (each has a next rung to agree with)."""
        return list(range(1, max(1, epochs // self.eta) + 1))

    def next_of(self, rung: int, epochs: int) -> int:
        return min(rung * self.eta, epochs)

    def agreement(self, curves: Sequence[Sequence[float]], rung: int, epochs: int) -> Agreement:
        versus = self.next_of(rung, epochs)
        pairs = [(c[rung - 1], c[versus - 1]) for c in curves if len(c) >= versus]
        pairs = [(a, b) for a, b in pairs if math.isfinite(a) and math.isfinite(b)]
        rho = spearman([a for a, _ in pairs], [b for _, b in pairs]) if len(pairs) >= 3 else 0.0
        return Agreement(rung, versus, rho, len(pairs))

    def update(self, curves: Sequence[Sequence[float]], epochs: int) -> list[int]:
        """The cutting rungs for a run of `epochs` given these curves (recomputed only when they changed)."""
        key = (len(curves), sum(len(c) for c in curves), epochs)  # running trials' curves grow in place
        if key == self._key:
            return self.ladder
        self._key, self._table = key, {}
        first = None
        for c in self.candidates(epochs):
            a = self._table[c] = self.agreement(curves, c, epochs)
            if a.proven(self.min_agreement, self.min_trials):
                first = c
                break
        ladder: list[int] = []
        r = first
        while r is not None and r < epochs:
            a = self._table.get(r) or self.agreement(curves, r, epochs)
            self._table[r] = a
            if a.proven(self.min_agreement, self.min_trials):
                ladder.append(r)
            r *= self.eta
        self.ladder = ladder
        return ladder

    @property
    def first(self) -> int | None:
        """The learned first rung (None: no rung proven yet)."""
        return self.ladder[0] if self.ladder else None

    def table(self) -> list[Agreement]:
        return [self._table[r] for r in sorted(self._table)]


__all__ = ["MIN_AGREEMENT", "MIN_TRIALS", "Agreement", "LearnedRungs", "spearman"]
