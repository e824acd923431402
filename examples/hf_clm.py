"""Causal language modeling with the Hugging Face `Trainer`, laid out as the Transformers guide lays it out
(docs/source/en/tasks/language_modeling.md: a tokenizer, `preprocess_function`, `group_texts` into blocks,
`DataCollatorForLanguageModeling(mlm=False)`, `TrainingArguments`, `Trainer`, `trainer.train()`, perplexity from
`trainer.evaluate()`), rewritten for this repository with offline data: a 2-layer GPT-2 built from a config (random
weights, nothing downloaded) learns ELI5-style answers this file writes, with a word-level tokenizer built from them.

    python examples/hf_clm.py                 # the script as it is: one training, then the guide's perplexity
    autotune run examples/hf_clm.yaml         # tuned: the lines marked `# autotune` are all that tuning adds

The lines marked `# autotune` are what tuning adds or changes (6): the import, `fit = hf.trainer_fit(trainer)`,
the `__main__` guard, and under it `trainer.train()` and the guide's evaluation (2 lines), kept for a plain run
instead of running when autotune imports the file. Every trial starts from the model's weights as this file built
them, with the Trainer's arguments below except the settings the study chooses (examples/hf_clm.yaml). Changed
from the guide: the data and tokenizer (offline), the model's size (from a config), the learning rate (2e-5
fine-tunes distilgpt2; a model trained from scratch needs more), and `push_to_hub` left out (nothing leaves this
machine).
"""

from __future__ import annotations

import math
import random

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    DataCollatorForLanguageModeling,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

from autotune.integrations import hf  # autotune

# ---------------------------------------------------------------- the answers (ELI5's role, offline)

THINGS = "sky sea grass snow blood coal sun moon".split()
COLOURS = {"sky": "blue", "sea": "blue", "grass": "green", "snow": "white", "blood": "red", "coal": "black",
           "sun": "yellow", "moon": "grey"}
WHY = ("because light scatters", "because of what it is made of", "because of how it reflects light",
       "because our eyes see it so")
FILLER = "well basically so actually honestly simply put in short".split()


def write_answers(n: int, seed: int) -> list[dict[str, object]]:
    """`n` ELI5 entries, each with a list of answers (the guide flattens `answers.text`): sentences that say what
    colour a thing is and why, so the next word is often predictable from the words before it."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        answers = []
        for _ in range(rng.randint(1, 3)):
            thing = rng.choice(THINGS)
            words = [rng.choice(FILLER), "the", thing, "is", COLOURS[thing], rng.choice(WHY), "."]
            answers.append(" ".join(words))
        rows.append({"answers.text": answers})
    return rows


eli5 = {"train": write_answers(400, seed=0), "test": write_answers(100, seed=1)}

# ---------------------------------------------------------------- preprocess

words = sorted({w for split in eli5.values() for row in split for a in row["answers.text"] for w in a.split()})
vocab = {w: i for i, w in enumerate(["<|endoftext|>", "[UNK]", *words])}
word_level = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, unk_token="[UNK]", eos_token="<|endoftext|>")


def preprocess_function(examples: dict[str, list]) -> dict[str, list]:
    return tokenizer([" ".join(x) for x in examples["answers.text"]])


block_size = 32


def group_texts(examples: dict[str, list]) -> dict[str, list]:
    # Concatenate all texts.
    concatenated_examples = {k: sum(examples[k], []) for k in examples.keys()}
    total_length = len(concatenated_examples[list(examples.keys())[0]])
    # We drop the small remainder, we could add padding if the model supported it instead of this drop, you can
    # customize this part to your needs.
    if total_length >= block_size:
        total_length = (total_length // block_size) * block_size
    # Split by chunks of block_size.
    result = {
        k: [t[i: i + block_size] for i in range(0, total_length, block_size)]
        for k, t in concatenated_examples.items()
    }
    result["labels"] = result["input_ids"].copy()
    return result


class Blocks(torch.utils.data.Dataset):
    """A split as the guide's `eli5.map(preprocess_function, batched=True).map(group_texts, batched=True)` leaves
    it: rows of `block_size` token ids (no `datasets` needed)."""

    def __init__(self, rows: list[dict[str, object]]) -> None:
        tokenized = preprocess_function({"answers.text": [r["answers.text"] for r in rows]})
        grouped = group_texts({k: list(v) for k, v in tokenized.items()})
        self.rows = [dict(zip(grouped, values)) for values in zip(*grouped.values())]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, object]:
        return self.rows[i]


lm_dataset = {split: Blocks(rows) for split, rows in eli5.items()}
tokenizer.pad_token = tokenizer.eos_token
data_collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm=False)

# ---------------------------------------------------------------- train

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_positions=block_size, n_embd=32, n_layer=2, n_head=2,
                                   bos_token_id=0, eos_token_id=0))

training_args = TrainingArguments(
    output_dir="runs/hf_clm",
    eval_strategy="epoch",
    learning_rate=2e-3,
    weight_decay=0.01,
)

trainer = Trainer(
    model=model,
    args=training_args,
    train_dataset=lm_dataset["train"],
    eval_dataset=lm_dataset["test"],
    data_collator=data_collator,
    processing_class=tokenizer,
)

fit = hf.trainer_fit(trainer)  # autotune: `trainer: hf_clm:fit` in the YAML
if __name__ == "__main__":  # autotune: the plain run only (autotune imports this file)
    trainer.train()  # autotune: was not indented
    eval_results = trainer.evaluate()  # autotune: was not indented
    print(f"Perplexity: {math.exp(eval_results['eval_loss']):.2f}")  # autotune: was not indented
