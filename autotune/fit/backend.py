"""Where a study's trials train: `REAL` (this process, the trainer) or a stand-in with the same signature.

The objective takes its "train this plan" from a `Backend` and nothing else: the sampler, the speed probe, the stop
rules, the pruners and the records all run unchanged whether the epochs are really trained or replayed from a
recording on a simulated clock (bench/replay_backend.py). A backend that trains nothing in this process (`real`
False) has no CPU of its own to measure and no tensors to free: the contention windows (an oversubscription
verdict read off a replay's idle thread would be false) and the memory housekeeping between trials (a full
garbage collection each time) are off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from autotune.fit import trainer
from autotune.training import OnEpoch, TrainResult

Train = Callable[..., TrainResult]  # (plan, fit, probe=, on_epoch=, on_record=, keep_model=), as trainer.train


@dataclass(frozen=True)
class Backend:
    train: Train
    real: bool = True  # trains in this process: its CPU share is the trial's, its memory is freed between trials

    def tidy(self, step: Callable[[], None]) -> None:
        """Run a memory housekeeping step (accel.freeze_survivors, release_memory...) where training is real."""
        if self.real:
            step()


REAL = Backend(trainer.train)

__all__ = ["REAL", "Backend", "OnEpoch", "Train"]
