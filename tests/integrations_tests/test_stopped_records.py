"""A stored trial holds what trained in every state it ends in: a pruned or failed trial under a framework's loop
stores the settings, the `recipe` and the `not_applied` a finished one would (not the catalogue's defaults: adam,
10 epochs, constant, eval batch 1024, for a Trainer that trained AdamW, 2 epochs, linear). Checked against what
the framework held, read back by the user's own callback during that very trial (issue 49)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import create_trial

import autotune
from autotune.search.pruners import EPOCH_VALUES
from autotune.study.runner import open_study

FAIL_LR = 0.0042  # the user's callback fails a trial at this lr (at its first evaluation)

HF_SCRIPT = '''
import json, os
import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback
from autotune.integrations import hf

VOCAB, LENGTH = 32, 8


class Data(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 2, (n,), generator=g)
        self.x = torch.randint(3, VOCAB, (n, LENGTH), generator=g)
        self.x[:, 1] = self.y + 1

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i]}


def value(v):
    return str(getattr(v, "value", v))


class ReadBack(TrainerCallback):
    """The user's callback: at the first evaluation, the arguments the Trainer trains with."""

    def on_evaluate(self, args, state, control, **kw):
        seen = {"learning_rate": args.learning_rate, "num_train_epochs": args.num_train_epochs,
                "lr_scheduler_type": value(args.lr_scheduler_type), "optim": value(args.optim),
                "per_device_train_batch_size": args.per_device_train_batch_size,
                "per_device_eval_batch_size": args.per_device_eval_batch_size, "max_grad_norm": args.max_grad_norm,
                "gradient_accumulation_steps": args.gradient_accumulation_steps, "seed": args.seed}
        with open(os.path.join(os.environ["READ_BACK"], f"hf-{args.learning_rate}.json"), "w") as f:
            json.dump(seen, f)
        if abs(args.learning_rate - FAIL_LR) < 1e-12:
            raise RuntimeError("the evaluation broke")


def make_trainer(args):
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=LENGTH, num_labels=2)
    return Trainer(model=BertForSequenceClassification(cfg), args=args, train_dataset=Data(96, 0),
                   eval_dataset=Data(32, 1), callbacks=[ReadBack()],
                   compute_metrics=lambda p: {"accuracy": float((np.argmax(p.predictions, -1) == p.label_ids).mean())})


fit = hf.trainer_fit(make_trainer, output_dir="runs", num_train_epochs=2, lr_scheduler_type="linear",
                     optim="adamw_torch", per_device_train_batch_size=16, per_device_eval_batch_size=32, seed=7)
'''.replace("FAIL_LR", repr(FAIL_LR))

LIGHTNING_SCRIPT = '''
import json, os
import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from autotune.integrations import lightning as tune_lightning

g = torch.Generator().manual_seed(0)
X = torch.randn(96, 8, generator=g)
Y = (X[:, 0] > 0).long()


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 2)

    def training_step(self, batch, i):
        return F.cross_entropy(self.net(batch[0]), batch[1])

    def validation_step(self, batch, i):
        logits = self.net(batch[0])
        self.log("val_accuracy", (logits.argmax(1) == batch[1]).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.5)


class ReadBack(L.Callback):
    """The user's callback: at the first validation's end, what the Trainer trains with."""

    def on_validation_end(self, trainer, module):
        if trainer.sanity_checking:
            return
        opt = trainer.optimizers[0]
        lr = opt.param_groups[0]["lr"]
        seen = {"max_epochs": trainer.max_epochs, "optimizer": type(opt).__name__, "lr": lr,
                "momentum": opt.param_groups[0]["momentum"], "batch_size": trainer.train_dataloader.batch_size,
                "gradient_clip_val": trainer.gradient_clip_val, "precision": trainer.precision,
                "accumulate_grad_batches": trainer.accumulate_grad_batches}
        with open(os.path.join(os.environ["READ_BACK"], f"lightning-{round(lr / 0.1, 6)}.json"), "w") as f:
            json.dump(seen, f)
        if abs(lr / 0.1 - FAIL_LR) < 1e-9:
            raise RuntimeError("the validation broke")


def fit(ctx):
    train = DataLoader(TensorDataset(X, Y), batch_size=24, shuffle=True)
    tune_lightning.fit(ctx, Net(), train_dataloaders=train, val_dataloaders=DataLoader(TensorDataset(X, Y)),
                       max_epochs=2, callbacks=[ReadBack()])
'''.replace("FAIL_LR", repr(FAIL_LR))


def _study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, script: str, space: dict[str, Any],
           points: list[dict[str, Any]]) -> list[Any]:
    """The user's script and its YAML; a finished trial no real one can match (so the Pareto pruner stops the
    first queued trial at its first evaluation, whatever the machine's load), then `points`."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("READ_BACK", str(tmp_path))
    (tmp_path / f"{name}.py").write_text(script, encoding="utf-8")
    doc = {"study": {"name": name, "storage": f"sqlite:///{tmp_path}/{name}.db", "n_trials": 1 + len(points)},
           "trainer": f"{name}:fit", "train": {"device": "cpu"}, "space": space,
           "objectives": [{"metric": "val_accuracy", "direction": "maximize"}, "train_time_s"],
           "pruning": {"pruner": "pareto", "pruner_args": {"n_startup_trials": 1, "n_warmup_steps": 1}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(doc), encoding="utf-8")
    cfg = autotune.load_config(str(path))
    study = open_study(cfg)
    study.add_trial(create_trial(values=[1.0, 1e-6], user_attrs={EPOCH_VALUES: [[1.0, 1e-6], [1.0, 2e-6]]}))
    for point in points:
        study.enqueue_trial(point)
    return autotune.run(cfg).study.trials[1:]


def _seen(tmp_path: Path, name: str) -> dict[str, Any]:
    return json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8"))


def test_a_pruned_and_a_failed_hf_trial_store_the_arguments_the_trainer_trained_with(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    space = {"lr": {"type": "categorical", "choices": [0.001, FAIL_LR]},
             "pin_memory": {"type": "categorical", "choices": [True]}}  # (no pinned memory on a CPU: not applied)
    pruned, failed = _study(tmp_path, monkeypatch, "stopped_hf", HF_SCRIPT, space,
                            [{"lr": 0.001, "pin_memory": True}, {"lr": FAIL_LR, "pin_memory": True}])
    assert pruned.state.name == "PRUNED" and pruned.user_attrs["stop_reason"] == "dominated", pruned.user_attrs
    assert failed.state.name == "FAIL" and "the evaluation broke" in failed.user_attrs["error"], failed.user_attrs
    for t in (pruned, failed):
        r = t.user_attrs
        seen = _seen(tmp_path, f"hf-{t.params['lr']}")
        settings, recipe = r["settings"], r["recipe"]
        assert set(settings).isdisjoint(recipe), (settings, recipe)
        stored = {**settings, **recipe}
        assert stored["lr"] == seen["learning_rate"] and "lr" in settings  # the trial's
        assert stored["epochs"] == seen["num_train_epochs"] == 2  # the user's, not the catalogue's 10
        assert stored["lr_schedule"] == seen["lr_scheduler_type"] == "linear"  # not constant
        assert stored["optimizer"].startswith(seen["optim"])  # the Trainer's AdamW, not adam
        assert stored["batch_size"] == seen["per_device_train_batch_size"] == 16
        assert stored["eval_batch_size"] == seen["per_device_eval_batch_size"] == 32  # not 1024
        assert stored["grad_clip"] == seen["max_grad_norm"] and stored["grad_accum_steps"] == 1
        assert stored["seed"] == seen["seed"] == 7 and "seed" in recipe  # the user's seed trained, and says so
        assert set(r["not_applied"]) == {"pin_memory"}, r["not_applied"]
        assert "pin_memory" not in settings


def test_a_pruned_and_a_failed_lightning_trial_store_what_the_trainer_trained_with(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("lightning")
    space = {"lr": {"type": "categorical", "choices": [0.5, FAIL_LR]},  # (a multiplier of the module's own lrs)
             "channels_last": {"type": "categorical", "choices": [True]}}
    pruned, failed = _study(tmp_path, monkeypatch, "stopped_lightning", LIGHTNING_SCRIPT, space,
                            [{"lr": 0.5, "channels_last": True}, {"lr": FAIL_LR, "channels_last": True}])
    assert pruned.state.name == "PRUNED" and pruned.user_attrs["stop_reason"] == "dominated", pruned.user_attrs
    assert failed.state.name == "FAIL" and "the validation broke" in failed.user_attrs["error"], failed.user_attrs
    for t in (pruned, failed):
        r = t.user_attrs
        seen = _seen(tmp_path, f"lightning-{t.params['lr']}")
        settings, recipe = r["settings"], r["recipe"]
        assert set(settings).isdisjoint(recipe), (settings, recipe)
        stored = {**settings, **recipe}
        assert stored["epochs"] == seen["max_epochs"] == 2  # the user's Trainer argument, not the catalogue's 10
        assert stored["optimizer"].startswith(seen["optimizer"]) and stored["momentum"] == seen["momentum"]  # SGD
        assert stored["lr"] == t.params["lr"] and seen["lr"] == pytest.approx(0.1 * t.params["lr"])  # a multiplier
        assert r["effective_lrs"] == [pytest.approx(seen["lr"])] and r["own_group_lrs"] == [0.1]
        assert stored["batch_size"] == seen["batch_size"] == 24 and "eval_batch_size" not in settings
        assert stored["grad_clip"] == (seen["gradient_clip_val"] or 0.0)
        assert "lr_schedule" not in settings and "constant" not in str(recipe.get("lr_schedule"))
        assert r["not_applied"] == {"channels_last": "the model has no 2-D convolution"}, r["not_applied"]
