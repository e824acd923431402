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


def test_the_shipped_timm_config_validates_and_runs_two_tiny_trials(tmp_path: Path) -> None:
    """search_spaces/timm_resnet.yaml: `autotune validate` as shipped; then its model and space, cut to 2 trials of
    1-2 epochs on the CPU, through `autotune run`, as a user would."""
    import subprocess
    import sys

    import optuna
    import yaml

    src = Path(__file__).resolve().parents[2] / "search_spaces" / "timm_resnet.yaml"

    def autotune_cli(*args: str) -> None:
        r = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, cwd=tmp_path,
                           timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr

    autotune_cli("validate", str(src), "--storage", f"sqlite:///{tmp_path}/shipped.db")
    doc = yaml.safe_load(src.read_text())
    doc["study"].update(n_trials=2, storage=f"sqlite:///{tmp_path}/t.db")
    doc["space"]["epochs"].update(low=1, high=2)
    doc["train"]["device"] = "cpu"
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(doc))
    autotune_cli("run", str(tmp_path / "tiny.yaml"), "--plain")
    trials = optuna.load_study(study_name=doc["study"]["name"], storage=doc["study"]["storage"]).trials
    assert len(trials) == 2 and any(t.state.name == "COMPLETE" for t in trials), [t.user_attrs for t in trials]
    n = sum(p.numel() for p in timm.create_model("resnet10t", num_classes=10, in_chans=1).parameters())
    assert all(t.user_attrs["model_params"] == n for t in trials if t.state.name == "COMPLETE")  # timm's resnet10t
