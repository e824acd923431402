"""Written the way pytorch/examples' word_language_model/main.py is (an LSTM language model, BSD-3-Clause): its
arguments parsed at import (`args = parser.parse_args()` at module level), its own `Corpus`, `batchify` and
`get_batch` (no DataLoader), truncated backpropagation through time with the hidden state carried and detached,
plain SGD at lr 20 with gradient clipping at 0.25, and the lr divided by 4 whenever the validation loss did not
improve. `python examples/word_lm.py [--epochs 6 --seed 1111 ...]` runs it as the original does (`main`);
`autotune run examples/word_lm.yaml` runs `fit`, the same training on the trial context. The data are three small
files in examples/data/word_lm (the original reads wikitext-2 from the same layout: `--data DIR`).

While autotune imports this module, sys.argv is `[this file]`: `args` holds the defaults. Under autotune the seed
is the trial's (`study.trial_seed: 1111` makes trial 0 train the original's default seed), clipping is
`grad_clip` (ctx.backward clips before its step), and the SGD the fit builds is the one that steps.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser(description="PyTorch RNN/LSTM language model (pytorch/examples' shape)")
parser.add_argument("--data", type=str, default=os.path.join(os.path.dirname(__file__), "data", "word_lm"),
                    help="location of the data corpus (train.txt, valid.txt, test.txt)")
parser.add_argument("--model", type=str, default="LSTM", help="type of recurrent net (RNN_TANH, RNN_RELU, LSTM, GRU)")
parser.add_argument("--emsize", type=int, default=200, help="size of word embeddings")
parser.add_argument("--nhid", type=int, default=200, help="number of hidden units per layer")
parser.add_argument("--nlayers", type=int, default=2, help="number of layers")
parser.add_argument("--lr", type=float, default=20, help="initial learning rate")
parser.add_argument("--clip", type=float, default=0.25, help="gradient clipping")
parser.add_argument("--epochs", type=int, default=40, help="upper epoch limit")
parser.add_argument("--batch_size", type=int, default=20, metavar="N", help="batch size")
parser.add_argument("--bptt", type=int, default=35, help="sequence length")
parser.add_argument("--dropout", type=float, default=0.2, help="dropout applied to layers (0 = no dropout)")
parser.add_argument("--tied", action="store_true", help="tie the word embedding and softmax weights")
parser.add_argument("--seed", type=int, default=1111, help="random seed")
parser.add_argument("--log-interval", type=int, default=200, metavar="N", help="report interval")
args = parser.parse_args()

eval_batch_size = 10


class Dictionary:
    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


class Corpus:
    def __init__(self, path: str) -> None:
        self.dictionary = Dictionary()
        self.train = self.tokenize(os.path.join(path, "train.txt"))
        self.valid = self.tokenize(os.path.join(path, "valid.txt"))
        self.test = self.tokenize(os.path.join(path, "test.txt"))

    def tokenize(self, path: str) -> torch.Tensor:
        with open(path, encoding="utf8") as f:
            lines = [line.split() + ["<eos>"] for line in f]
        return torch.tensor([self.dictionary.add_word(w) for words in lines for w in words], dtype=torch.int64)


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type: str, ntoken: int, ninp: int, nhid: int, nlayers: int, dropout: float = 0.5,
                 tie_weights: bool = False) -> None:
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ["LSTM", "GRU"]:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers

    def forward(self, input: torch.Tensor, hidden: Any) -> tuple[torch.Tensor, Any]:
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz: int) -> Any:
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


def batchify(data: torch.Tensor, bsz: int, device: torch.device) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous().to(device)


def repackage_hidden(h: Any) -> Any:
    """Wraps hidden states in new Tensors, to detach them from their history."""
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


def get_batch(source: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(args.bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


def evaluate(model: RNNModel, data_source: torch.Tensor, criterion: nn.Module) -> float:
    model.eval()
    total_loss = 0.0
    hidden = model.init_hidden(eval_batch_size)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, args.bptt):
            data, targets = get_batch(data_source, i)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def main() -> None:
    """The original program: its own SGD (p -= lr * grad after clipping), lr / 4 when validation stops improving."""
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    corpus = Corpus(args.data)
    train_data = batchify(corpus.train, args.batch_size, device)
    val_data = batchify(corpus.valid, eval_batch_size, device)
    ntokens = len(corpus.dictionary)
    model = RNNModel(args.model, ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.tied).to(device)
    criterion = nn.NLLLoss()
    lr = args.lr
    best_val_loss = None
    for epoch in range(1, args.epochs + 1):
        epoch_start_time = time.time()
        model.train()
        hidden = model.init_hidden(args.batch_size)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            data, targets = get_batch(train_data, i)
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            if batch % args.log_interval == 0 and batch > 0:
                print(f"| epoch {epoch:3d} | {batch:5d} batches | lr {lr:02.2f} | loss {loss.item():5.2f}")
        val_loss = evaluate(model, val_data, criterion)
        print(f"| end of epoch {epoch:3d} | time: {time.time() - epoch_start_time:5.2f}s | valid loss "
              f"{val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}")
        if not best_val_loss or val_loss < best_val_loss:
            best_val_loss = val_loss
        else:
            lr /= 4.0


def fit(ctx: Any) -> None:
    """`main` on the trial context: the SGD it builds steps (ctx.backward clips at `grad_clip` first), the epochs
    are ctx.epochs, the validation loss is reported each epoch; the lr annealing is the fit's own."""
    device = ctx.device
    corpus = Corpus(args.data)
    train_data = batchify(corpus.train, args.batch_size, device)
    val_data = batchify(corpus.valid, eval_batch_size, device)
    ntokens = len(corpus.dictionary)
    net = RNNModel(args.model, ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.tied)
    model, optimizer = ctx.prepare(net, torch.optim.SGD(net.parameters(), lr=args.lr))
    criterion = nn.NLLLoss()
    best_val_loss = None
    steps = len(range(0, train_data.size(0) - 1, args.bptt))
    for epoch in ctx.epochs(steps_per_epoch=steps):
        model.train()
        hidden = net.init_hidden(args.batch_size)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            data, targets = get_batch(train_data, i)
            hidden = repackage_hidden(hidden)
            with ctx.autocast():
                output, hidden = model(data, hidden)
            loss = criterion(output.float(), targets)
            ctx.backward(loss, n_samples=targets.numel())  # (tokens: samples/s reads as tokens/s)
            if batch % args.log_interval == 0 and batch > 0:
                lr = optimizer.param_groups[0]["lr"]
                print(f"| epoch {epoch:3d} | {batch:5d} batches | lr {lr:02.2f} | loss {loss.item():5.2f}")
        val_loss = evaluate(ctx.model, val_data, criterion)
        ctx.report(val_loss=val_loss, val_ppl=math.exp(val_loss))
        if not best_val_loss or val_loss < best_val_loss:
            best_val_loss = val_loss
        else:
            for group in optimizer.param_groups:
                group["lr"] /= 4.0


if __name__ == "__main__":
    main()
