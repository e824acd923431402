"""Written the way pytorch/examples' mnist/main.py is: Adadelta with StepLR (your own optimizer and
schedule), a log line that reads `len(train_loader.dataset)`, and the test accuracy measured once, after the
last epoch (`examples/final_only.yaml`, on scikit-learn's bundled digits).

The objective is reported only at the end, so until then the Pareto pruner has no accuracy to compare:
autotune says so once (user attr `pruning_off`: per-epoch pruning is off for such a trial); the speed probe
and the slow rule work as always. The searched `lr` scales Adadelta's own learning rate (1.0, the example's).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from digits_data import digits
from torch import nn

import autotune


class Net(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, 1, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, 1, padding=1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(2 * width * 16, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def test(model: nn.Module, loader: Any) -> tuple[float, float]:
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            loss += float(F.nll_loss(output, target, reduction="sum"))
            correct += int((output.argmax(dim=1) == target).sum())
    n = len(loader.dataset)
    return loss / n, correct / n


def fit(ctx: autotune.TrialContext) -> dict[str, float]:
    x, y, x_test, y_test = digits()
    net = Net(ctx.params["width"])
    model, optimizer = ctx.prepare(net, torch.optim.Adadelta(net.parameters(), lr=1.0))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=ctx.params["gamma"])
    train_loader = ctx.loader((x, y))
    test_loader = ctx.loader((x_test, y_test), train=False)
    for epoch in ctx.epochs():
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            with ctx.autocast():  # the searched precision
                output = model(data)
            loss = F.nll_loss(output.float(), target)
            ctx.backward(loss)
            if ctx.params["log_interval"] and batch_idx % ctx.params["log_interval"] == 0:
                print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]\t"
                      f"Loss: {loss.item():.6f}")
        scheduler.step()
    test_loss, accuracy = test(ctx.model, test_loader)  # once, after training: the objective is final-only
    return {"test_accuracy": accuracy, "test_loss": test_loss}
