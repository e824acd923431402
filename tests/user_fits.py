"""Users' own training functions, as a user would write them, referenced as 'tests.user_fits:NAME'."""

from __future__ import annotations

import time
import weakref
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

import autotune


def blobs(n: int = 600, n_features: int = 8, n_classes: int = 3, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Gaussian blobs: learnable in a few epochs by a small MLP."""
    protos = np.random.default_rng(123).normal(size=(n_classes, n_features)) * 1.5  # the same classes in every split
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    x = (rng.normal(size=(n, n_features)) + protos[y]).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y)


X, Y = blobs()
X_VAL, Y_VAL = blobs(200, seed=1)


class MLP(nn.Module):
    def __init__(self, width: int = 32, n_in: int = 8, n_out: int = 3) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, width), nn.ReLU(), nn.Linear(width, n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def accuracy(model: nn.Module, ctx: autotune.TrialContext) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        logits = model(X_VAL.to(ctx.device)).float()
        y = Y_VAL.to(ctx.device)
        return float((logits.argmax(1) == y).float().mean()), float(nn.functional.cross_entropy(logits, y))


def fit(ctx: autotune.TrialContext) -> None:
    """The plain-PyTorch shape of the README example: a user model, data, loss and loop."""
    model, _ = ctx.prepare(MLP(width=ctx.params.get("width", 32)))
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        model.train()
        for x, y in train:
            with ctx.autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            ctx.backward(loss)
        acc, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


def fit_sleepy(ctx: autotune.TrialContext) -> None:
    """`user.sleep_ms` per step and `user.lr_scale`: a slow, barely learning trial when asked (for pruning tests)."""
    model, _ = ctx.prepare(MLP(), lambda p: torch.optim.SGD(p, lr=0.1 * ctx.params.get("lr_scale", 1.0)))
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        model.train()
        for x, y in train:
            time.sleep(ctx.params.get("sleep_ms", 0) / 1000)
            loss = nn.functional.cross_entropy(model(x), y)
            ctx.backward(loss)
        acc, val_loss = accuracy(model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


def fit_nan_last_epoch(ctx: autotune.TrialContext) -> None:
    """The README fit whose last epoch's accuracy comes out NaN (say, an empty validation shard): no loss is
    non-finite, so only the objective's own check can catch it."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for epoch in ctx.epochs():
        model.train()
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        acc, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=float("nan") if epoch == ctx.settings["epochs"] else acc, val_loss=val_loss)


def fit_mae(ctx: autotune.TrialContext) -> dict[str, float]:
    """Regression with a user metric (val_mae) reported each epoch and a final one returned."""
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(400, 5)).astype(np.float32))
    w = torch.arange(1.0, 6.0)
    y = (x @ w)[:, None] + 0.1 * torch.from_numpy(rng.normal(size=(400, 1)).astype(np.float32))
    model, _ = ctx.prepare(nn.Sequential(nn.Linear(5, ctx.params.get("width", 16)), nn.ReLU(),
                                         nn.Linear(ctx.params.get("width", 16), 1)))
    train = ctx.loader((x[:300], y[:300]))
    xv, yv = x[300:].to(ctx.device), y[300:].to(ctx.device)
    mae = float("nan")
    for _ in ctx.epochs():
        model.train()
        for xb, yb in train:
            with ctx.autocast():
                loss = nn.functional.mse_loss(model(xb).float(), yb)
            ctx.backward(loss)
        with torch.no_grad():
            mae = float((ctx.model(xv) - yv).abs().mean())
        ctx.report(val_mae=mae)
    return {"val_mae": mae}


PROBE: list[dict[str, Any]] = []


class ProbeNet(nn.Module):
    """A conv net that records what it ran under: dtype, memory format, compile state."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 8 * 8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        if self.training:
            PROBE.append({"conv_dtype": h.dtype,
                          "channels_last": h.is_contiguous(memory_format=torch.channels_last)
                          and not h.is_contiguous(),
                          "compiling": torch.compiler.is_compiling()})
        return self.head(torch.relu(h))


IMAGES = torch.randn(128, 3, 8, 8)
LABELS = torch.randint(0, 4, (128,))
SEEN: dict[str, Any] = {}


def fit_probe(ctx: autotune.TrialContext) -> None:
    PROBE.clear()
    model, opt = ctx.prepare(ProbeNet())
    SEEN.update(model=model, opt=opt, scaler=ctx._state.scaler, matmul=torch.get_float32_matmul_precision(),
                cudnn_benchmark=torch.backends.cudnn.benchmark, conv_tf32=torch.backends.cudnn.allow_tf32,
                threads=torch.get_num_threads())
    train = ctx.loader((IMAGES, LABELS))
    SEEN["batches"] = len(train)
    for _ in ctx.epochs():
        model.train()
        for x, y in train:
            with ctx.autocast():
                loss = nn.functional.cross_entropy(model(x).float(), y)
            ctx.backward(loss)
        ctx.report(val_loss=loss.detach())


class PairDataset(Dataset):
    """A map-style dataset (no tensors to keep on the device): the DataLoader path."""

    def __len__(self) -> int:
        return len(Y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return X[i], Y[i]


def fit_dataset(ctx: autotune.TrialContext) -> None:
    model, _ = ctx.prepare(MLP())
    train = ctx.loader(PairDataset())
    SEEN["loader_batches"] = len(train)
    for _ in ctx.epochs():
        model.train()
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        acc, val_loss = accuracy(model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


def fit_raises(ctx: autotune.TrialContext) -> None:
    model, _ = ctx.prepare(MLP())
    for _ in ctx.epochs():
        config = {"width": 8}
        _ = config["depth"]  # the user's bug: a KeyError on this line
        ctx.report(val_accuracy=0.0)


def fit_raises_on_odd_trials(ctx: autotune.TrialContext) -> None:
    if ctx.params["flaky"]:
        raise ValueError("flaky data shard")
    fit(ctx)


def fit_fails_once(ctx: autotune.TrialContext) -> None:
    """A transient OSError before training on its first call only (the file `user.marker` tells), then `fit`."""
    from pathlib import Path

    marker = Path(ctx.params["marker"])
    if not marker.exists():
        marker.write_text("failed once\n")
        raise OSError(5, "Input/output error", str(marker))
    fit(ctx)


def fit_reports_unknown(ctx: autotune.TrialContext) -> None:
    model, _ = ctx.prepare(MLP())
    for _ in ctx.epochs():
        ctx.report(val_f2=0.5)


def fit_reports_clock(ctx: autotune.TrialContext) -> None:
    model, _ = ctx.prepare(MLP())
    for _ in ctx.epochs():
        ctx.report(train_time_s=1.0)


def fit_reports_twice(ctx: autotune.TrialContext) -> None:
    model, _ = ctx.prepare(MLP())
    for _ in ctx.epochs():
        ctx.report(val_accuracy=0.5)
        ctx.report(val_loss=0.5)


def fit_catches_stop(ctx: autotune.TrialContext) -> None:
    """Catches the stop exception and trains on: the context says that cannot work."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        try:
            ctx.report(val_accuracy=0.0)
        except Exception:
            x, y = next(iter(train))
            ctx.backward(nn.functional.cross_entropy(model(x), y))


def fit_backward_before_prepare(ctx: autotune.TrialContext) -> None:
    for _ in ctx.epochs():
        ctx.backward(torch.zeros((), requires_grad=True))


def fit_no_epochs(ctx: autotune.TrialContext) -> None:
    ctx.prepare(MLP())


OOM_MODELS: list[weakref.ref] = []
OOM_SEEN: list[dict[str, Any]] = []


class _BigActivations(nn.Module):
    """Raises what CUDA raises when a training batch is larger than `limit` (a CPU stand-in for OOM)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.inner = MLP()
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {x.shape[0]} MiB (test)")
        return self.inner(x)


def fit_oom_above_32(ctx: autotune.TrialContext) -> None:
    # what the previous attempt of this trial left alive when this one starts
    OOM_SEEN.append({"batch_size": ctx.settings.batch_size, "eval_batch_size": ctx.settings["eval_batch_size"],
                     "earlier_models_alive": [r() is not None for r in OOM_MODELS]})
    net = _BigActivations(32)
    OOM_MODELS.append(weakref.ref(net))
    model, _ = ctx.prepare(net)
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        model.train()
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        acc, val_loss = accuracy(model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


def not_a_fit(ctx: Any, other: Any) -> None:
    """Takes two arguments: not a training function."""


def fit_illegal_address(ctx: autotune.TrialContext) -> None:
    """What a kernel's bad index does on a GPU: the CUDA context of the process is gone."""
    raise RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                       "asynchronously reported at some other API call")


def fit_ranks(ctx: autotune.TrialContext) -> None:
    """The README-shaped fit on one rank of several: each step logged to `user.log_dir`/rank<R>.txt (pid, epoch,
    step, samples, the model classes); `user.crash` (raise | sigkill) ends rank 1 at its third step of epoch 2."""
    import os
    import signal
    from pathlib import Path

    log = Path(ctx.params["log_dir"]) / f"rank{ctx.rank}.txt" if "log_dir" in ctx.params else None
    crash = ctx.params.get("crash", "none")
    model, _ = ctx.prepare(MLP(width=ctx.params.get("width", 32)))
    kinds = f"{type(model).__name__}/{type(ctx.model).__name__}"
    train = ctx.loader(PairDataset() if ctx.params.get("dataset") else (X, Y))
    step = 0
    for epoch in ctx.epochs():
        model.train()
        for i, (x, y) in enumerate(train):
            if crash != "none" and ctx.rank == 1 and epoch == 2 and i == 2:
                if crash == "raise":
                    raise ValueError("bad shard on rank 1")
                os.kill(os.getpid(), signal.SIGKILL)
            with ctx.autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            ctx.backward(loss)
            step += 1
            if log is not None:
                with open(log, "a") as f:
                    f.write(f"{os.getpid()} {epoch} {step} {len(x)} {kinds} {ctx.world_size}\n")
        acc, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


CALLS: list[dict[str, Any]] = []  # the params of every call of fit_picky in this process


def fit_picky(ctx: autotune.TrialContext) -> None:
    """fit_sleepy, except that channels_last fails on the first step (as an op without a kernel for that layout
    would). Every call is logged in CALLS: a trial stopped before it trains never calls it."""
    CALLS.append(dict(ctx.params))
    if ctx.params["channels_last"]:
        raise RuntimeError("no channels_last kernel for this operator")
    fit_sleepy(ctx)


def fit_slow_last_epoch(ctx: autotune.TrialContext) -> None:
    """The README fit whose last epoch's training takes `user.last_sleep_s` longer (one slow step): only its finished
    training is over a time limit."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for epoch in ctx.epochs():
        model.train()
        for i, (x, y) in enumerate(train):
            if epoch == ctx.settings.epochs and i == 0:
                time.sleep(ctx.params.get("last_sleep_s", 0.0))
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        acc, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


OWN_LRS: list[list[float]] = []  # fit_own_optimizer: each trial's group lrs after ctx.prepare


def two_groups(net: nn.Module, lr: float = 0.01, bias_lr: float = 0.64) -> list[dict[str, Any]]:
    """airbench's parameter groups: the biases at 64x the weights' lr."""
    named = list(net.named_parameters())
    return [{"params": [p for n, p in named if not n.endswith("bias")], "lr": lr},
            {"params": [p for n, p in named if n.endswith("bias")], "lr": bias_lr}]


def fit_own_optimizer(ctx: autotune.TrialContext) -> None:
    """Ported training: its own SGD over two groups, its own LambdaLR (built after ctx.prepare) and its own loss."""
    net = MLP()
    model, opt = ctx.prepare(net, torch.optim.SGD(two_groups(net), momentum=0.9, nesterov=True))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + 0.01 * step))
    OWN_LRS.append([g["lr"] for g in opt.param_groups])
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        model.train()
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
            sched.step()
        acc, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


def fit_never_reports(ctx: autotune.TrialContext) -> None:
    """Trains and evaluates, but forgets ctx.report."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        accuracy(ctx.model, ctx)


def fit_reports_loss_only(ctx: autotune.TrialContext) -> None:
    """Reports each epoch, but not the study's objective (val_accuracy): val_loss only."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        ctx.report(val_loss=accuracy(ctx.model, ctx)[1])


def fit_reports_misspelt(ctx: autotune.TrialContext) -> None:
    """Reports the study's objective (val_accuracy) under a misspelt name, val_acc."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        ctx.report(val_acc=accuracy(ctx.model, ctx)[0])


def fit_reports_at_the_end(ctx: autotune.TrialContext) -> None:
    """nanoGPT's shape: the objective (val_bpb) is evaluated at the last epoch only; the loss each epoch."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for epoch in ctx.epochs():
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        _, val_loss = accuracy(ctx.model, ctx)
        if epoch == ctx.settings.epochs:
            ctx.report(val_loss=val_loss, val_bpb=val_loss / 0.693)
        else:
            ctx.report(val_loss=val_loss)


def fit_own_loss_reads_smoothing(ctx: autotune.TrialContext) -> None:
    """The README fit with a loss of its own that reads the searched label_smoothing."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        model.train()
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y, label_smoothing=ctx.settings.label_smoothing))
        acc, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


def fit_sleeps_forever(ctx: autotune.TrialContext) -> None:
    """Hangs where no ctx call runs: in a training step (`user.where: step`) or in evaluation between epochs.
    `user.ready`: a file created just before the step's sleep (a test signals the fit there, not at a guessed time)."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        for x, y in train:
            if ctx.params.get("where") == "step":
                if ctx.params.get("ready"):
                    open(ctx.params["ready"], "w").close()
                time.sleep(10_000)  # a step that never returns
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        time.sleep(10_000)  # an evaluation that never returns
        ctx.report(val_accuracy=0.0, val_loss=1.0)


def fit_swallows_everything(ctx: autotune.TrialContext) -> None:
    """Stuck for good: catches every exception, whatever stops it (a stand-in for code stuck in native code)."""
    ctx.prepare(MLP())
    for _ in ctx.epochs():
        while True:
            try:
                time.sleep(10_000)
            except BaseException:  # noqa: B036 (the user's bug, on purpose)
                pass


def fit_exits(ctx: autotune.TrialContext) -> None:
    """Ends the program from inside training: sys.exit(3) (`user.how: exit` calls exit() instead)."""
    import sys

    fit_quick(ctx, epochs_then=lambda: sys.exit(3) if ctx.params.get("how") != "exit" else exit())


def fit_quick(ctx: autotune.TrialContext, epochs_then: Any = None) -> None:
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        if epochs_then is not None:
            epochs_then()
        acc, val_loss = accuracy(model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


def fit_leaves_a_thread(ctx: autotune.TrialContext) -> None:
    """Starts a non-daemon thread that never ends (a user's background logger), then trains normally."""
    import threading

    threading.Thread(target=time.sleep, args=(10_000,), name="users-logger").start()
    fit_quick(ctx)


def fit_host_oom_above_32(ctx: autotune.TrialContext) -> None:
    """A real CPU out-of-memory (torch's DefaultCPUAllocator) when the training batch is over 32."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        for x, y in train:
            if x.shape[0] > 32:
                torch.empty(2**45)  # 128 TiB: "can't allocate memory"
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        acc, val_loss = accuracy(model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


def fit_hoards_memory(ctx: autotune.TrialContext) -> None:
    """Keeps 16 MB more host memory every step, never letting go (a leak that would end in the kernel's OOM killer)."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    hoard = []
    for _ in ctx.epochs():
        for x, y in train:
            hoard.append(torch.ones(4 * 2**20))  # written: resident, not just reserved
            time.sleep(0.02)
            if len(hoard) > 64:  # 1 GB: the test's cap is far below (a safety net for this shared machine)
                raise RuntimeError("fit_hoards_memory was never stopped")
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        ctx.report(val_accuracy=0.0, val_loss=1.0)


def fit_nan_perplexity(ctx: autotune.TrialContext) -> None:
    """A language model's shape: its objective is val_ppl (not named `*loss`), NaN from epoch 2 on; a metric that is
    no objective (grad_norm) is NaN in epoch 1."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for epoch in ctx.epochs():
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        _, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_ppl=float("nan") if epoch >= 2 else float(np.exp(val_loss)),
                   grad_norm=float("nan") if epoch == 1 else 1.0)


def fit_reports(value: Any) -> Any:
    """A fit that reports `value` as its val_accuracy in epoch 1 (a bool, a string, None, a tensor...)."""
    def fit(ctx: autotune.TrialContext) -> None:
        model, _ = ctx.prepare(MLP())
        for _ in ctx.epochs():
            ctx.report(val_accuracy=value)  # the line a misuse names
    return fit


def fit_reports_a_bool(ctx: autotune.TrialContext) -> None:
    """`ctx.report(val_accuracy=acc > 0.5)`: a bool where the number belongs."""
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        acc, _ = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=acc > 0.5)


def fit_scheduler_before_prepare(ctx: autotune.TrialContext) -> None:
    """airbench's groups with its LambdaLR built before ctx.prepare: a searched lr cannot scale them."""
    net = MLP()
    opt = torch.optim.SGD(two_groups(net), momentum=0.9)
    torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    ctx.prepare(net, opt)  # misuse: the scheduler came first


def fit_factory_returns_junk(ctx: autotune.TrialContext) -> None:
    ctx.prepare(MLP(), lambda params: list(params))  # misuse: not an optimizer


def fit_own_batches_no_samples(ctx: autotune.TrialContext) -> None:
    model, _ = ctx.prepare(MLP())
    for _ in ctx.epochs():
        ctx.backward(nn.functional.cross_entropy(model(X[:32]), Y[:32]))  # misuse: samples unknown


def fit_returns_a_list(ctx: autotune.TrialContext) -> list[float]:
    model, _ = ctx.prepare(MLP())
    for _ in ctx.epochs():
        ctx.report(val_accuracy=0.5)
    return [0.5]


LOGGED: list[dict[str, Any]] = []  # fit_logs_settings: what each trial logged


def fit_logs_settings(ctx: autotune.TrialContext) -> None:
    """Ported training that logs the trial's settings at start-up (every key read), then trains its own way: its own
    SGD over two groups, its own LambdaLR, its own loss without label smoothing."""
    LOGGED.append({k: ctx.settings[k] for k in ("optimizer", "lr", "momentum", "weight_decay", "lr_schedule",
                                                "label_smoothing")})
    net = MLP()
    model, opt = ctx.prepare(net, torch.optim.SGD(two_groups(net), momentum=0.9))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + 0.01 * step))
    train = ctx.loader((X, Y))
    for _ in ctx.epochs():
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
            sched.step()
        acc, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss)


def fit_holds_memory(ctx: autotune.TrialContext) -> None:
    """Holds `user.hold_mb` MB more host memory in each epoch (written, so resident) until the trial ends, and
    reports `score` = hold_mb: the trial that takes the most memory scores best."""
    hold_mb = int(ctx.params["hold_mb"])
    model, _ = ctx.prepare(MLP())
    train = ctx.loader((X, Y))
    held = []
    for _ in ctx.epochs():
        model.train()
        held.append(torch.ones(hold_mb * 2**18))  # float32: 2**18 values a MB
        for x, y in train:
            ctx.backward(nn.functional.cross_entropy(model(x), y))
        acc, val_loss = accuracy(ctx.model, ctx)
        ctx.report(val_accuracy=acc, val_loss=val_loss, score=float(hold_mb))
