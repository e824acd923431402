"""Stop rules that need nothing but the trial itself: divergence, projected training time and the memory cap.

Pure functions raising `TrialStopped`; the trial context calls them after every epoch. Rules that
need the study (Optuna's pruners, the Pareto pruners, `vs_front`) live in pruners.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.core import TrialStopped


@dataclass(frozen=True)
class Limits:
    """The per-trial limits a study sets (`pruning:`); None turns a rule off."""

    loss_factor: float | None = None  # divergence: loss above loss_factor x reference
    max_trial_seconds: float | None = None  # slow: projected training time above this
    hang_seconds: float | None = None  # wall time of the whole trial, checked before every step
    max_peak_memory_mb: float | None = None  # memory: the trial's peak (memory.py) above this (constraints:)


def check_divergence(losses: Sequence[float], loss_factor: float, epoch: int, chance_loss: float = math.inf) -> None:
    """Non-finite loss, or a loss above loss_factor x the reference, is divergence.

    The reference is the first epoch's loss, but never more than the loss of guessing
    (ln of the class count): a first epoch that already blew up must not become the yardstick.
    """
    last = losses[-1]
    if not math.isfinite(last):
        raise TrialStopped("diverged", epoch, "non-finite training loss")
    ref = min(losses[0], chance_loss)
    if last > loss_factor * ref:
        why = "first epoch's loss, at most ln(classes)" if math.isfinite(chance_loss) else "first epoch's loss"
        raise TrialStopped("diverged", epoch, f"training loss {last:.3g} > {loss_factor:g} x {ref:.3g} ({why})")


def projected_time_s(elapsed_s: float, epoch: int, epochs: int) -> float:
    """Train time the whole run will take, at the mean epoch time so far."""
    return elapsed_s / epoch * epochs


def check_slow(elapsed_s: float, epoch: int, epochs: int, max_trial_seconds: float | None) -> None:
    """Projected training time over `max_trial_seconds`; never at the last epoch: the training it would save is
    done, and a finished trial is kept (it was worth its time)."""
    if max_trial_seconds is None or epoch >= epochs:
        return
    proj = projected_time_s(elapsed_s, epoch, epochs)
    if proj > max_trial_seconds:
        raise TrialStopped("slow", epoch, f"projected {proj:.1f}s > max_trial_seconds {max_trial_seconds:g}")


def check_memory(peak_mb: float | None, epoch: int, max_peak_memory_mb: float | None) -> None:
    """The trial's peak memory over `max_peak_memory_mb`: stopped now rather than trained on to be infeasible."""
    if max_peak_memory_mb is not None and peak_mb is not None and peak_mb > max_peak_memory_mb:
        raise TrialStopped("memory", epoch, f"peak {peak_mb:.0f} MB > max_peak_memory_mb {max_peak_memory_mb:g}")
