"""Written the way airbench94 is: your own SGD-Nesterov with two parameter groups (biases at 64x the weights'
learning rate), your own LambdaLR schedule stepped every step, label smoothing in your own loss, a loop that
`break`s at its step budget, and test-time augmentation in the evaluation (`examples/groups_sgd.yaml`).

What autotune applies here: precision, channels_last, batch_size, compile, and the searched `lr` as a
multiplier of both groups' own learning rates (your optimizer keeps its 64x ratio). What it cannot apply
(the optimizer family, momentum, weight_decay, lr_schedule) is not searched in the YAML; were it searched,
the trial would record it as `not_applied` and the recommendation would leave it out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from digits_data import digits
from torch import nn

import autotune


def net(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.GELU(),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.GELU(), nn.MaxPool2d(2),
        nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.GELU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * 4, 10))


def tta_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The mean of the logits of the image and its one-pixel shifts (digits are not mirror-symmetric)."""
    views = [x, torch.roll(x, 1, dims=3), torch.roll(x, -1, dims=3)]
    return torch.stack([model(v).float() for v in views]).mean(0)


def fit(ctx: autotune.TrialContext) -> dict[str, float]:
    x, y, x_test, y_test = digits()
    model = net(ctx.params["width"])
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    weights = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    base_lr = 0.05
    opt = torch.optim.SGD([{"params": weights, "lr": base_lr, "weight_decay": 5e-4},
                           {"params": biases, "lr": base_lr * 64, "weight_decay": 5e-4 / 64}],
                          momentum=0.85, nesterov=True)
    model, opt = ctx.prepare(model, opt)  # searched lr scales both groups; the 64x ratio stays
    train = ctx.loader((x, y))
    steps_per_epoch = max(1, int(0.9 * len(train)))  # airbench trains a step budget, not whole epochs
    total = steps_per_epoch * ctx.settings.epochs
    # the schedule is built after ctx.prepare, so it starts from the learning rates the trial applied
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: max(0.0, 1 - step / total) * min(1.0, (step + 1) / 10))
    smoothing = ctx.params["label_smoothing"]
    x_test, y_test = x_test.to(ctx.device), y_test.to(ctx.device)
    for _ in ctx.epochs(steps_per_epoch=steps_per_epoch):  # the epoch's real length, for the speed probe
        model.train()
        for step, (xb, yb) in enumerate(train):
            if step == steps_per_epoch:
                break  # leaves the loader early: the epoch's training clock stopped at the last step
            with ctx.autocast():
                loss = F.cross_entropy(model(xb).float(), yb, label_smoothing=smoothing)
            ctx.backward(loss)
            sched.step()
        ctx.model.eval()
        with torch.inference_mode(), ctx.autocast():
            logits = tta_logits(ctx.model, x_test.contiguous(memory_format=torch.channels_last)
                                if ctx.settings.channels_last else x_test)
        ctx.report(val_accuracy=float((logits.argmax(1) == y_test).float().mean()),
                   val_loss=float(F.cross_entropy(logits, y_test)))
    return {"group_lr_ratio": opt.param_groups[1]["initial_lr"] / opt.param_groups[0]["initial_lr"]}
