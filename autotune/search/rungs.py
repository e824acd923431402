"""Rungs where ranks carry information: which epochs a successive-halving pruner may cut at, learned from the study.

A fixed first rung at epoch 1 is a coin flip wherever the first epoch says little about the last: a warm-up, a
cosine or one-cycle schedule, a large first-epoch start-up, or LCBench's epoch 1 (an untrained network; YAHPO Gym
advises epochs 2-51). As Syne Tune's PASHA decides how far to train from whether the rankings at consecutive rungs
agree, `LearnedRungs` measures, over the trials (finished, and other workers' running ones so far), how well the
quality ranks at an epoch r agree with the ranks at the next rung (r x eta, or the last epoch): Spearman's rank
correlation, over the trials that reached both. Once a rung cuts, those are the trials it promoted (its top: a
narrower spread of quality than all that reached it, which reads as a weaker correlation), so the correlation is
corrected for that range restriction (Thorndike's case II, `unrestricted`). A rung is *proven* when at least
`min_trials` trials reached its next rung and the correlation is at least `min_agreement` with its lower one-sigma
bound (Fisher's z) above zero; it is *disproven* when as many trials show a correlation whose upper one-sigma bound
is below `min_agreement` (ranks that say little about the next rung's).

Two ways to read that evidence (`optimistic`):
- proven (`optimistic=False`): the first rung is the smallest proven r; the ladder r, r x eta, ... cuts only at its
  proven rungs. Until then nothing is cut: the first trials run their full length, and their curves are the
  evidence. On one worker that is the first 6-9 trials at full cost.
- optimistic (the default): the first rung is the smallest r not disproven, and the ladder cuts at every rung not
  disproven. A study cuts from epoch 1 at once and moves its first rung up only when the curves of the trials that
  passed it show its ranks disagree with the next rung's (a warm-up, a one-cycle schedule, an untrained first
  epoch). A rung is kept unless the evidence is clearly against it.
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


def unrestricted(rho: float, everyone: Sequence[float], selected: Sequence[float]) -> float:
    """A correlation measured over `selected` (the trials that passed a rung: its top, a narrower spread of quality)
    as it would read over `everyone` that reached the rung: Thorndike's case II correction for direct range
    restriction, rho u / sqrt(1 - rho^2 + rho^2 u^2) with u the ratio of the two spreads (1: nothing selected)."""
    if len(everyone) < 2 or len(selected) < 2:
        return rho
    wide, narrow = float(np.std(everyone)), float(np.std(selected))
    if narrow <= 0 or wide <= narrow:
        return rho
    u = wide / narrow
    return rho * u / math.sqrt(1 - rho * rho + rho * rho * u * u)


@dataclass(frozen=True)
class Agreement:
    rung: int  # the epoch judged
    versus: int  # the epoch it is compared with (the next rung, or the last epoch)
    rho: float
    trials: int  # trials with both epochs

    def proven(self, min_agreement: float = MIN_AGREEMENT, min_trials: int = MIN_TRIALS) -> bool:
        if self.trials < max(min_trials, 4) or self.rho < min_agreement:
            return False
        return self._bound(-1.0) > 0.0

    def disproven(self, min_agreement: float = MIN_AGREEMENT, min_trials: int = MIN_TRIALS) -> bool:
        """Enough trials, and even the upper one-sigma bound of their correlation is below `min_agreement`."""
        return self.trials >= max(min_trials, 4) and self._bound(1.0) < min_agreement

    def _bound(self, sigmas: float) -> float:
        """rho moved by `sigmas` standard errors on Fisher's z scale (n - 3 degrees of freedom)."""
        z = math.atanh(max(-0.999999, min(self.rho, 0.999999)))
        return math.tanh(z + sigmas / math.sqrt(self.trials - 3))


class LearnedRungs:
    """The rungs of a successive-halving ladder with reduction `eta`, learned from the trials' curves (so far) of
    one quality objective (`curves`: per trial, its quality after each epoch, higher better). `optimistic`: a rung
    cuts until it is disproven (else only once it is proven)."""

    def __init__(self, eta: int, min_agreement: float = MIN_AGREEMENT, min_trials: int = MIN_TRIALS,
                 optimistic: bool = True) -> None:
        self.eta = eta
        self.optimistic = optimistic
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
        if len(pairs) < 3:
            return Agreement(rung, versus, 0.0, len(pairs))
        rho = spearman([a for a, _ in pairs], [b for _, b in pairs])
        seen = [v for c in curves if len(c) >= rung and math.isfinite(v := c[rung - 1])]
        return Agreement(rung, versus, unrestricted(rho, seen, [a for a, _ in pairs]), len(pairs))

    def update(self, curves: Sequence[Sequence[float]], epochs: int) -> list[int]:
        """The cutting rungs for a run of `epochs` given these curves (recomputed only when they changed)."""
        key = (len(curves), sum(len(c) for c in curves), epochs)  # running trials' curves grow in place
        if key == self._key:
            return self.ladder
        self._key, self._table = key, {}
        first = None
        for c in self.candidates(epochs):
            a = self._table[c] = self.agreement(curves, c, epochs)
            if self._cuts(a):
                first = c
                break
        ladder: list[int] = []
        r = first
        while r is not None and r < epochs:
            a = self._table.get(r) or self.agreement(curves, r, epochs)
            self._table[r] = a
            if self._cuts(a):
                ladder.append(r)
            r *= self.eta
        self.ladder = ladder
        return ladder

    def _cuts(self, a: Agreement) -> bool:
        if self.optimistic:
            return not a.disproven(self.min_agreement, self.min_trials)
        return a.proven(self.min_agreement, self.min_trials)

    @property
    def first(self) -> int | None:
        """The learned first rung (None: no rung cuts: none proven yet, or with `optimistic`, every one disproven)."""
        return self.ladder[0] if self.ladder else None

    def table(self) -> list[Agreement]:
        return [self._table[r] for r in sorted(self._table)]


__all__ = ["MIN_AGREEMENT", "MIN_TRIALS", "Agreement", "LearnedRungs", "spearman", "unrestricted"]
