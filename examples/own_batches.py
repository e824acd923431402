"""Written the way nanoGPT's train.py is: your own `get_batch` drawing random windows of a text (no
`ctx.loader`), AdamW with decayed and undecayed parameter groups, your own cosine schedule with warm-up set
on the groups every iteration, gradient clipping, a fixed number of iterations per "epoch" and an
evaluation of the loss on both splits (`examples/own_batches.yaml`; the tiny text in examples/data/).

Without `ctx.loader`, autotune cannot see your batches: `ctx.epochs(steps_per_epoch=...)` says how long an
epoch is and `ctx.backward(loss, n_samples=...)` how many samples each step trained on, so samples/s, the
speed probe and the clocks are true. The learning rate is yours here (`user.max_lr`): your schedule sets it
every step, so a searched `lr` could not act and is not in the YAML.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import autotune

CORPUS = Path(__file__).parent / "data" / "tiny_corpus.txt"


@functools.lru_cache(maxsize=2)
def corpus(path: str) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(vocabulary size, train ids, val ids): characters as ids, the last 10% for validation."""
    text = Path(path).read_text(encoding="utf-8")
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(ch) for ch in text], dtype=torch.long)
    cut = int(len(ids) * 0.9)
    return len(vocab), ids[:cut], ids[cut:]


class CharMLP(nn.Module):
    """A block_size-character context, embedded, flattened and mapped to the next character (Bengio 2003)."""

    def __init__(self, vocab: int, block: int, embed: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(block * embed, hidden), nn.LayerNorm(hidden), nn.GELU())
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(idx)))


def fit(ctx: autotune.TrialContext) -> None:
    vocab, train_ids, val_ids = corpus(str(CORPUS))
    block, iters = ctx.params["block_size"], ctx.params["iters_per_epoch"]
    gen = torch.Generator().manual_seed(ctx.seed)

    def get_batch(split: str, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        data = train_ids if split == "train" else val_ids
        ix = torch.randint(len(data) - block, (batch_size,), generator=gen)
        x = torch.stack([data[i:i + block] for i in ix])
        y = torch.stack([data[i + block] for i in ix])
        return x.to(ctx.device), y.to(ctx.device)

    model = CharMLP(vocab, block, ctx.params["embed"], ctx.params["hidden"])
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    max_lr = ctx.params["max_lr"]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=max_lr, betas=(0.9, 0.95))
    model, opt = ctx.prepare(model, opt)
    warmup, total = iters // 2, iters * ctx.settings.epochs

    def get_lr(it: int) -> float:  # nanoGPT's: linear warm-up, then cosine down to a tenth
        if it < warmup:
            return max_lr * (it + 1) / warmup
        ratio = min(1.0, (it - warmup) / max(1, total - warmup))
        return max_lr / 10 + 0.5 * (1 + math.cos(math.pi * ratio)) * (max_lr - max_lr / 10)

    it = 0
    for _ in ctx.epochs(steps_per_epoch=iters):
        model.train()
        for _ in range(iters):
            for group in opt.param_groups:
                group["lr"] = get_lr(it)
            x, y = get_batch("train", ctx.settings.batch_size)
            with ctx.autocast():
                loss = F.cross_entropy(model(x).float(), y)
            ctx.backward(loss, n_samples=len(x))  # clipping (grad_clip) and the optimizer step happen here
            it += 1
        ctx.model.eval()
        with torch.inference_mode(), ctx.autocast():
            losses = {split: float(F.cross_entropy(ctx.model(x).float(), y))
                      for split, (x, y) in (("train", get_batch("train", 512)), ("val", get_batch("val", 512)))}
        ctx.report(val_loss=losses["val"], train_eval_loss=losses["train"])
