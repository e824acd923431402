"""Hugging Face Trainer scripts as users write them, on a synthetic task this module makes, for the integration's
tests (referenced as 'tests.integrations_tests.hf_scripts:NAME'): a tiny BERT from a config learns whether a
sequence holds more 5s or 6s.

`plain_accuracy` trains the script without autotune (what `python script.py` does); `fit` is the same script, tuned
(the guide's layout: a module-level model and Trainer handed to `hf.trainer_fit`); the other fits are the layouts
that go wrong (a module-level model under a make_trainer) or that check what the Trainer received."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

from autotune.integrations import hf

VOCAB, LENGTH = 32, 16
SEEN: dict[str, Any] = {}  # what the last trial's Trainer held


class Counts(torch.utils.data.Dataset):
    """`n` sequences of random ids with some 5s and 6s; label 1 when the 5s outnumber the 6s."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(8, VOCAB, (n, LENGTH), generator=g)
        fives = torch.randint(0, 4, (n,), generator=g)
        sixes = torch.randint(0, 4, (n,), generator=g)
        sixes = torch.where(sixes == fives, sixes + 1, sixes)
        for i in range(n):
            where = torch.randperm(LENGTH - 1, generator=g)[: int(fives[i] + sixes[i])] + 1
            self.ids[i, where[: fives[i]]] = 5
            self.ids[i, where[fives[i]:]] = 6
        self.ids[:, 0] = 2
        self.labels = (fives > sixes).long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(LENGTH, dtype=torch.long),
                "labels": self.labels[i]}


TRAIN, VAL = Counts(768, seed=0), Counts(256, seed=1)


def accuracy(pred: Any) -> dict[str, float]:
    return {"accuracy": float((np.argmax(pred.predictions, -1) == pred.label_ids).mean())}


def new_model(seed: int = 0) -> BertForSequenceClassification:
    torch.manual_seed(seed)
    return BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=LENGTH, num_labels=2))


def user_args(output_dir: str = "runs/hf_scripts", **changes: Any) -> TrainingArguments:
    """The user's recipe: AdamW (the Trainer's default), a linear schedule with warmup, 3 epochs, eval batch 16,
    max_grad_norm 1.0 (the default)."""
    return TrainingArguments(output_dir=output_dir, learning_rate=3e-3, per_device_train_batch_size=32,
                             per_device_eval_batch_size=16, num_train_epochs=3, weight_decay=0.01, warmup_steps=0.1,
                             eval_strategy="epoch", save_strategy="no", report_to="none", disable_tqdm=True,
                             use_cpu=True, **changes)


class Capture(TrainerCallback):
    """What the Trainer held when training began: its arguments, the model's first weights, its optimizer."""

    def on_train_begin(self, args: TrainingArguments, state: Any, control: Any, **kw: Any) -> None:
        model = kw["model"]
        first = model.bert.embeddings.word_embeddings.weight.detach().clone()
        SEEN.setdefault("firsts", []).append(first)
        SEEN.update(args=args, first=first, optimizer=kw.get("optimizer"), model=model)


def plain_accuracy(seed: int = 42) -> float:
    """The script without autotune: its Trainer trained as it is; the final evaluation's accuracy."""
    trainer = Trainer(model=new_model(), args=user_args(seed=seed), train_dataset=TRAIN, eval_dataset=VAL,
                      compute_metrics=accuracy)
    trainer.train()
    return float(trainer.evaluate()["eval_accuracy"])


# The guide's layout: a module-level model, TrainingArguments and Trainer; autotune gets the Trainer.
model = new_model()
trainer = Trainer(model=model, args=user_args(), train_dataset=TRAIN, eval_dataset=VAL, compute_metrics=accuracy,
                  callbacks=[Capture()])
fit = hf.trainer_fit(trainer)

# A make_trainer over a module-level model: every trial would train the same object further.
shared_model = new_model()


def make_over_shared_model(args: TrainingArguments) -> Trainer:
    return Trainer(model=shared_model, args=args, train_dataset=TRAIN, eval_dataset=VAL, compute_metrics=accuracy)


fit_shared_model = hf.trainer_fit(make_over_shared_model, output_dir="runs/hf_scripts", num_train_epochs=1,
                                  use_cpu=True)


def make_fresh(args: TrainingArguments, ctx: Any) -> Trainer:
    return Trainer(model=new_model(), args=args, train_dataset=TRAIN, eval_dataset=VAL, compute_metrics=accuracy,
                   callbacks=[Capture()])


fit_fresh = hf.trainer_fit(make_fresh, output_dir="runs/hf_scripts", learning_rate=3e-3, num_train_epochs=2,
                           per_device_eval_batch_size=16, warmup_steps=0.1, weight_decay=0.01, use_cpu=True)
