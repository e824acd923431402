"""A Hugging Face `Trainer` script, tuned as it is: a tiny BERT-style classifier built from a config (random
weights, nothing downloaded) on a synthetic text task, trained by `Trainer` (`examples/hf_text.yaml`).

The task: sequences of word ids; the label says whether the review holds the word "good" (id 5) or "bad" (id 6),
one to three times among random words. The script is what a Trainer user already has; the lines marked
`# autotune` are the ones tuning added or changed (3, and 2 optional ones): the Trainer is built from the
`TrainingArguments` autotune gives (the searched learning rate, batch size, precision, accumulation,
schedule...) and the trial's context (a `user.` parameter picks the model's width, the searched dropout is read
from `ctx.settings`).
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer

from autotune.integrations import hf  # autotune

VOCAB, LENGTH, GOOD, BAD = 64, 24, 5, 6


class Reviews(torch.utils.data.Dataset):
    """`n` synthetic reviews: random words with "good" (label 1) or "bad" (label 0) sprinkled in."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 2, (n,), generator=g)
        self.ids = torch.randint(8, VOCAB, (n, LENGTH), generator=g)
        where = torch.rand(n, LENGTH, generator=g) < torch.randint(1, 4, (n, 1), generator=g) / LENGTH
        self.ids[where] = torch.where(self.labels == 1, GOOD, BAD)[:, None].expand(-1, LENGTH)[where]
        self.ids[:, 0] = 2  # [CLS]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(LENGTH, dtype=torch.long),
                "labels": self.labels[i]}


TRAIN, VAL = Reviews(768, seed=0), Reviews(256, seed=1)


def accuracy(pred) -> dict[str, float]:
    return {"accuracy": float((np.argmax(pred.predictions, -1) == pred.label_ids).mean())}


def make_trainer(args, ctx) -> Trainer:  # autotune: was `args = TrainingArguments(...)`, and no ctx
    width = ctx.params["hidden"]  # autotune (optional): a searched user.hidden
    config = BertConfig(vocab_size=VOCAB, hidden_size=width, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=2 * width, max_position_embeddings=LENGTH, num_labels=2,
                        hidden_dropout_prob=ctx.settings.dropout,  # autotune (optional)
                        attention_probs_dropout_prob=0.0)
    torch.manual_seed(args.seed)
    model = BertForSequenceClassification(config)
    return Trainer(model=model, args=args, train_dataset=TRAIN, eval_dataset=VAL, compute_metrics=accuracy)


fit = hf.trainer_fit(make_trainer, output_dir="runs/hf_text")  # autotune: `trainer: hf_text:fit` in the YAML
