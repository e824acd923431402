"""Training functions that misbehave as code inside a host's program does (issue 43), as 'tests.guest_fits:NAME'."""

from __future__ import annotations

import random
import time

import torch
from torch import nn

import autotune
from tests.user_fits import MLP, X, Y, accuracy


def fit_skips_bad_batches(ctx: autotune.TrialContext) -> None:
    """Skips a batch whatever goes wrong in it (a bare `except:` around a slow step): it swallows the watchdog's
    interrupt too, then carries on to the next batch, and the next..."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X[:80], Y[:80]), batch_size=8)  # 10 steps of 0.4 s
    for _ in ctx.epochs():
        for x, y in train:
            try:
                time.sleep(0.4)  # a slow step (a large torch.save, an evaluation in C...)
                ctx.backward(nn.functional.cross_entropy(model(x), y))
            except:  # noqa: E722 (the user's bug, on purpose)
                pass
        acc, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


def fit_swallows_everything(ctx: autotune.TrialContext) -> None:
    """A bare `except:` around 0.4 s steps in a loop that calls nothing of the context (its own batches): nothing
    autotune owns is reached for 6 s, so an interrupt is swallowed until the epoch's end (a stuck trial)."""
    ctx.prepare(MLP())
    for _ in ctx.epochs():
        t0 = time.monotonic()
        while time.monotonic() - t0 < 6:
            try:
                time.sleep(0.4)
            except:  # noqa: E722 (the user's bug, on purpose)
                pass


def fit_raises_keyboard_interrupt(ctx: autotune.TrialContext) -> None:
    """The user's own code raises KeyboardInterrupt (its own Ctrl-C handling, a library's), not a signal."""
    model, _ = ctx.prepare(MLP())
    for _ in ctx.epochs():
        for x, y in ctx.loader((X, Y)):
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        raise KeyboardInterrupt


def fit_reports_a_numeric_string(ctx: autotune.TrialContext) -> None:
    """`ctx.report(val_accuracy=f"{acc:.3f}")`: a number as a string, a different one every trial."""
    model, _ = ctx.prepare(MLP())
    for _ in ctx.epochs():
        for x, y in ctx.loader((X, Y)):
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        ctx.report(val_accuracy=f"{random.random():.3f}")


def fit_slow(ctx: autotune.TrialContext) -> None:
    """Sleeps in its steps (2 s an epoch) while it trains: long enough to be interrupted in."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X[:100], Y[:100]), batch_size=10)
    for _ in ctx.epochs():
        for x, y in train:
            time.sleep(0.2)
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        acc, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


def fit_loader_workers_hold_memory(ctx: autotune.TrialContext) -> None:
    """Its DataLoader's worker processes each hold `user.worker_mb` MB while they serve batches."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader(_Heavy(int(ctx.params["worker_mb"])))
    for _ in ctx.epochs():
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        ctx.report(val_accuracy=0.5, val_loss=1.0)


class _Heavy(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Each DataLoader worker touches `mb` MB of its own (a decoded image cache) once it serves an item."""

    def __init__(self, mb: int) -> None:
        self.mb = mb
        self.held: bytearray | None = None

    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.held is None:
            n = self.mb * 2**20
            self.held = bytearray(n)
            self.held[::4096] = b"\1" * len(range(0, n, 4096))  # written: resident, the worker's own
            time.sleep(0.5)  # long enough to be seen
        return X[i], Y[i]
