"""Text classification with the Hugging Face `Trainer`, laid out as the Transformers guide lays it out
(docs/source/en/tasks/sequence_classification.md: a tokenizer, a preprocessing function, dynamic padding,
accuracy, `TrainingArguments`, `Trainer`, `trainer.train()`), rewritten for this repository with offline data: a
2-layer BERT built from a config (random weights, nothing downloaded) learns movie-review sentiment on reviews this
file writes, and the tokenizer is a word-level one built from them.

    python examples/hf_seqcls.py                 # the script as it is: one training with the guide's settings
    autotune run examples/hf_seqcls.yaml         # tuned: the lines marked `# autotune` are all that tuning adds

The lines marked `# autotune` are what tuning adds or changes: the import, `fit = hf.trainer_fit(trainer)`, and
`trainer.train()` kept for a plain run (`python hf_seqcls.py`) instead of running when autotune imports the file.
Every trial starts from the model's weights as this file built them, with the Trainer's arguments below except
the settings the study chooses (examples/hf_seqcls.yaml).
"""

from __future__ import annotations

import random

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

from autotune.integrations import hf  # autotune

# ---------------------------------------------------------------- the reviews (IMDb's role, offline)

GOOD = "great superb moving delightful brilliant charming gripping wonderful".split()
BAD = "dull boring clumsy tedious awful bland forgettable painful".split()
FILLER = ("the film plot actor scene story script camera music ending director cast pace dialogue and but it was "
          "a an this of with in its felt seemed quite rather very at times").split()


def write_reviews(n: int, seed: int, noise: float = 0.05) -> list[dict[str, object]]:
    """`n` reviews: filler words and a few sentiment words, the label 1 (positive) when the good ones outnumber
    the bad ones. Many reviews mix both, so the model has to count, not spot one word; a share `noise` of the
    labels disagree with their text, as people's ratings do."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        label = rng.randint(0, 1)
        major, minor = (GOOD, BAD) if label else (BAD, GOOD)
        k = rng.randint(1, 3)
        words = [rng.choice(FILLER) for _ in range(rng.randint(8, 24))]
        words += [rng.choice(major) for _ in range(k + 1)] + [rng.choice(minor) for _ in range(rng.randint(0, k))]
        rng.shuffle(words)
        out.append({"text": " ".join(words), "label": label if rng.random() >= noise else 1 - label})
    return out


imdb = {"train": write_reviews(1200, seed=0), "test": write_reviews(400, seed=1)}

# ---------------------------------------------------------------- preprocess

vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *GOOD, *BAD, *FILLER])}
word_level = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, pad_token="[PAD]", unk_token="[UNK]",
                                    cls_token="[CLS]", sep_token="[SEP]", model_max_length=64)


def preprocess_function(examples: dict[str, list]) -> dict[str, list]:
    return tokenizer(["[CLS] " + t for t in examples["text"]], truncation=True)


class Tokenized(torch.utils.data.Dataset):
    """A split, tokenized once (the guide's `imdb.map(preprocess_function, batched=True)`)."""

    def __init__(self, rows: list[dict[str, object]]) -> None:
        enc = preprocess_function({"text": [r["text"] for r in rows]})
        self.rows = [{"input_ids": ids, "attention_mask": mask, "label": r["label"]}
                     for ids, mask, r in zip(enc["input_ids"], enc["attention_mask"], rows)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, object]:
        return self.rows[i]


tokenized_imdb = {split: Tokenized(rows) for split, rows in imdb.items()}
data_collator = DataCollatorWithPadding(tokenizer=tokenizer)

# ---------------------------------------------------------------- evaluate


def compute_metrics(eval_pred) -> dict[str, float]:
    predictions, labels = eval_pred
    predictions = np.argmax(predictions, axis=1)
    return {"accuracy": float((predictions == labels).mean())}


# ---------------------------------------------------------------- train

id2label = {0: "NEGATIVE", 1: "POSITIVE"}
label2id = {"NEGATIVE": 0, "POSITIVE": 1}

torch.manual_seed(0)
model = BertForSequenceClassification(BertConfig(
    vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
    max_position_embeddings=64, num_labels=2, id2label=id2label, label2id=label2id))

training_args = TrainingArguments(
    output_dir="runs/hf_seqcls",
    learning_rate=3e-3,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=16,
    num_train_epochs=3,
    weight_decay=0.01,
    warmup_steps=0.1,
    eval_strategy="epoch",
    save_strategy="epoch",
    load_best_model_at_end=True,
    metric_for_best_model="accuracy",
)

trainer = Trainer(
    model=model,
    args=training_args,
    train_dataset=tokenized_imdb["train"],
    eval_dataset=tokenized_imdb["test"],
    processing_class=tokenizer,
    data_collator=data_collator,
    compute_metrics=compute_metrics,
)

fit = hf.trainer_fit(trainer)  # autotune: `trainer: hf_seqcls:fit` in the YAML
if __name__ == "__main__":  # autotune: the plain run only (autotune imports this file)
    trainer.train()  # autotune: was not indented
