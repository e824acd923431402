"""Your own sequence model: a character-level GRU language model on a tiny text shipped with autotune
(examples/data/tiny_corpus.txt, the opening of Alice's Adventures in Wonderland, public domain), tuned
for validation perplexity against training time (`examples/char_gru.yaml`).
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


@functools.lru_cache(maxsize=4)
def windows(path: str, seq_len: int) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(vocabulary size, train inputs, train targets, val inputs, val targets): non-overlapping windows of
    seq_len characters, targets shifted by one; the last 10% of the text is the validation split."""
    text = Path(path).read_text(encoding="utf-8")
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(ch) for ch in text], dtype=torch.long)
    cut = int(len(ids) * 0.9)

    def cut_windows(seq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = (len(seq) - 1) // seq_len
        return seq[: n * seq_len].view(n, seq_len), seq[1: n * seq_len + 1].view(n, seq_len)

    return (len(vocab), *cut_windows(ids[:cut]), *cut_windows(ids[cut:]))


class CharGRU(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.gru = nn.GRU(hidden, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.embed(x))
        return self.head(out)


def fit(ctx: autotune.TrialContext) -> None:
    vocab, x, y, x_val, y_val = windows(str(ctx.params.get("corpus", CORPUS)), ctx.params["seq_len"])
    model, _ = ctx.prepare(CharGRU(vocab, ctx.params["hidden"], ctx.params["layers"], ctx.params["dropout"]))
    train = ctx.loader((x, y))
    val = ctx.loader((x_val, y_val), train=False)
    for _ in ctx.epochs():
        model.train()
        for xb, yb in train:
            with ctx.autocast():
                logits = model(xb)
            ctx.backward(F.cross_entropy(logits.float().flatten(0, 1), yb.flatten()))
        ctx.model.eval()
        loss_sum, n = 0.0, 0
        with torch.inference_mode(), ctx.autocast():
            for xb, yb in val:
                loss_sum += float(F.cross_entropy(ctx.model(xb).float().flatten(0, 1), yb.flatten(), reduction="sum"))
                n += yb.numel()
        ctx.report(val_loss=loss_sum / n, val_perplexity=math.exp(loss_sum / n))
