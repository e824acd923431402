"""The Python API (autotune/__init__.py): one shape for run and train, files as str or os.PathLike, the types a
user meets exported, and the context's optimizer names unambiguous."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
import yaml

import autotune
from autotune.training import TrialContext


def _run_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({
        "study": {"name": "api", "storage": f"sqlite:///{tmp_path}/api.db", "n_trials": 1},
        "data": {"name": "synthetic", "n_samples": 200}, "model": {"name": "mlp", "hidden": 8},
        "train": {"epochs": 1, "batch_size": 64, "device": "cpu", "cpu_threads": 1}}))
    return path


def test_run_and_train_take_a_path_as_well_as_a_str(tmp_path: Path) -> None:
    path = _run_file(tmp_path)
    assert autotune.load_config(path).source == autotune.load_config(str(path)).source == str(path)
    tr = autotune.train(path, params={"lr": 1e-2})
    assert tr.epochs_run == 1 and isinstance(tr.history[0], autotune.EpochRecord)
    res = autotune.run(path)
    assert len(res.study.trials) == 1 and res.config.source == str(path)
    with pytest.raises(autotune.ConfigError, match="no such file"):
        autotune.train(tmp_path / "missing.yaml")


def test_run_and_train_have_one_shape() -> None:
    run, train = inspect.signature(autotune.run).parameters, inspect.signature(autotune.train).parameters
    assert list(run) == ["cfg", "fit", "fresh", "cancel"]  # cancel: an Event that stops a run off the main thread
    assert all(run[k].kind is inspect.Parameter.KEYWORD_ONLY for k in ("fresh", "cancel"))
    assert list(train) == ["cfg", "params", "fit", "seed"]
    assert all(train[k].kind is inspect.Parameter.KEYWORD_ONLY for k in ("fit", "seed"))


def test_the_types_a_user_meets_are_exported() -> None:
    for name in ("TrialStopped", "ContextMisuse", "EpochRecord", "TrialContext", "TrainResult", "TuneResult",
                 "TrialSummary", "ConfigError", "AutotuneError"):
        assert name in autotune.__all__ and isinstance(getattr(autotune, name), type)
    assert issubclass(autotune.ContextMisuse, autotune.AutotuneError)
    assert issubclass(autotune.TrialStopped, autotune.AutotuneError)
    assert autotune.__version__ == autotune.core.__version__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        autotune.nope  # noqa: B018


def test_the_optimizer_is_what_prepare_returns_and_its_factory_ctx_optimizer_factory() -> None:
    ctx = TrialContext({"device": "cpu", "optimizer": "sgd", "lr": 0.1, "epochs": 1, "batch_size": 10})
    net = torch.nn.Linear(3, 2)
    factory = ctx.optimizer_factory
    assert isinstance(factory(net.parameters()), torch.optim.SGD)
    model, opt = ctx.prepare(net)
    assert opt is ctx._state.opt and isinstance(opt, torch.optim.SGD)
    assert not hasattr(ctx, "optimizer") and not hasattr(ctx, "opt")  # one name each: no aliases


def test_the_context_surface_is_small() -> None:
    ctx = TrialContext({"device": "cpu", "epochs": 1, "batch_size": 10})
    public = {n for n in dir(ctx) if not n.startswith("_")}
    assert public == {"autocast", "backward", "device", "epochs", "loader", "model", "optimizer_factory", "params",
                      "prepare", "rank", "report", "seed", "settings", "world_size"}
