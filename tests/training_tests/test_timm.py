"""timm in the built-in trainer's model registry, for real: `model: {name: timm, arch: ...}` trains on digits from
random weights, and warm-starts from a checkpoint file on disk (transfer learning, never a download).

Marked `timm`: timm imports torchvision, which needs a torchvision built for the installed torch; .ci/run runs
these in a second venv (torch 2.14.1, torchvision 0.29.1, timm) with `pytest -m timm`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import autotune
from autotune import config
from autotune.training import models

pytestmark = pytest.mark.timm
timm = pytest.importorskip("timm")

ARCH = "resnet10t"  # timm's smallest resnet: seconds on 8x8 digits


def digits_cfg(tmp_path: Path, **model: object) -> config.RunConfig:
    return config.from_dict({
        "study": {"name": "timm", "storage": f"sqlite:///{tmp_path}/t.db", "n_trials": 1},
        "data": {"name": "digits"}, "model": {"name": "timm", "arch": ARCH, **model},
        "train": {"epochs": 2, "batch_size": 64, "device": "cpu", "lr": 3e-3}}, source=str(tmp_path / "t.yaml"))


def test_a_timm_architecture_trains_from_random_weights(tmp_path: Path) -> None:
    r = autotune.train(digits_cfg(tmp_path))
    assert r.epochs_run == 2 and r.history[-1].train_loss < r.history[0].train_loss
    assert r.model_params == sum(p.numel() for p in timm.create_model(ARCH, num_classes=10, in_chans=1).parameters())


def test_a_timm_checkpoint_on_disk_warm_starts_the_trial(tmp_path: Path) -> None:
    donor = models.build(digits_cfg(tmp_path).model, (1, 8, 8), 10, 0.0, "default")
    with torch.no_grad():
        for p in donor.parameters():
            p.fill_(0.01)
    torch.save(donor.state_dict(), tmp_path / "donor.pt")
    cfg = digits_cfg(tmp_path, checkpoint=str(tmp_path / "donor.pt"))
    cfg = config.from_dict({**cfg.to_dict(), "train": {**cfg.train, "freeze": "all_but_head", "epochs": 1}},
                           source=cfg.source)
    r = autotune.train(cfg)
    frozen = [p for n, p in r.model.named_parameters() if not n.startswith(r.model.default_cfg["classifier"])]
    assert frozen and all(bool((p == 0.01).all()) for p in frozen if p.ndim > 1)  # loaded, then held fixed
    assert not bool((r.model.get_classifier().weight == 0.01).all())  # the head trained


def test_unknown_arch_names_close_timm_models() -> None:
    with pytest.raises(autotune.ConfigError, match=r"model\.arch: unknown timm arch 'resnet10x' \(did you mean"):
        config.from_dict({"model": {"name": "timm", "arch": "resnet10x"}})
