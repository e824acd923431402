"""The model registry: every builder, the resnet family, torchvision by name, and model keys per point."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from autotune import compress, config
from autotune.core.errors import ConfigError
from autotune.spec import Settings
from autotune.training import models


def n_params(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("depth", [8, 14, 20, 32, 44, 56])
def test_every_resnet_depth_forward_and_backward(depth: int) -> None:
    torch.manual_seed(0)
    m = models.resnet((3, 32, 32), 10, depth=depth, width=4)
    x = torch.randn(2, 3, 32, 32)
    out = m(x)
    assert out.shape == (2, 10)
    out.square().mean().backward()
    grads = [p.grad for p in m.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    blocks = [b for b in m.modules() if isinstance(b, models.BasicBlock)]
    assert len(blocks) == (depth - 2) // 2  # 3 stages of (depth - 2) / 6 blocks


@pytest.mark.parametrize("shape", [(1, 8, 8), (5, 9, 13), (3, 64, 48)])
def test_resnet_any_channels_and_size(shape: tuple[int, int, int]) -> None:
    m = models.resnet(shape, 4, depth=8, width=8)
    assert m(torch.randn(3, *shape)).shape == (3, 4)


def test_resnet20_size_and_width_scaling() -> None:
    assert n_params(models.resnet((3, 32, 32), 10)) == 272_474  # ResNet-20 of He et al.: 0.27 M
    p16, p32 = (n_params(models.resnet((3, 32, 32), 10, depth=20, width=w)) for w in (16, 32))
    assert 3.8 < p32 / p16 < 4.1  # conv weights scale with width squared


def test_resnet_quantizes_to_int8() -> None:
    torch.manual_seed(0)
    m = models.resnet((3, 16, 16), 10, depth=8, width=8).eval()
    x = torch.randn(64, 3, 16, 16)
    q = compress.quantize.quantize_static(m, [x[:32], x[32:]])
    with torch.no_grad():
        agree = (m(x).argmax(1) == q(x).argmax(1)).float().mean()
    assert agree > 0.8 and compress.measure.model_size_bytes(q) < 0.6 * compress.measure.model_size_bytes(m)


def test_config_names_and_keys_come_from_the_registry() -> None:
    with pytest.raises(ConfigError) as info:
        config.from_dict({"model": {"name": "nope"}})
    assert "allowed: " + ", ".join(sorted(models.MODELS)) in str(info.value)
    assert models.model_keys("cnn") == ("channels", "hidden")
    assert models.model_keys("mlp") == ("hidden", "depth")
    assert models.model_keys("resnet") == ("depth", "width")
    assert models.model_keys("torchvision") == ("arch",)


@pytest.fixture
def fake_torchvision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A stand-in torchvision package with the two functions autotune uses (list_models, get_model); the real
    one is an optional extra, not installed here (the GPU check runs it). Gone again after the test."""
    pkg = tmp_path / "torchvision"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(
        "import torch\nCALLS = []\n"
        "def list_models(module=None):\n    return ['resnet18', 'resnet34']\n"
        "def get_model(name, **kw):\n    CALLS.append((name, kw))\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(kw['num_classes']))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        monkeypatch.delitem(sys.modules, mod)
    yield
    for mod in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[mod]  # the stand-in; monkeypatch then puts back a real one, if there was one


@pytest.fixture
def fake_timm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, dict[str, object]]]]:
    """A stand-in timm with the three functions autotune uses (is_model, list_models, create_model): the real one
    needs a torchvision built for this torch (the timm tests, `-m timm`, run it in .ci/run's second venv).
    Yields the create_model calls."""
    pkg = tmp_path / "timm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import fnmatch\nimport torch\nCALLS = []\nNAMES = ['resnet18', 'resnet34', 'efficientnet_b0']\n"
        "def is_model(name):\n    return name in NAMES\n"
        "def list_models(pattern='*'):\n    return fnmatch.filter(NAMES, pattern)\n"
        "def create_model(name, **kw):\n    CALLS.append((name, kw))\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(kw['in_chans'], 4, 3), torch.nn.AdaptiveAvgPool2d(1),\n"
        "                               torch.nn.Flatten(), torch.nn.Linear(4, kw['num_classes']))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "timm", raising=False)
    import timm

    yield timm.CALLS
    del sys.modules["timm"]


# name -> the model section to build it from (its architecture keys at small values). A model added to the
# registry without a row here fails the contract test (KeyError).
MODEL_SECTIONS: dict[str, dict[str, object]] = {
    "cnn": {"channels": [4, 8], "hidden": 16}, "mlp": {"hidden": 16, "depth": 2}, "resnet": {"depth": 8, "width": 4},
    "torchvision": {"arch": "resnet18"}, "cnn1d": {"width": 4, "depth": 2}, "timm": {"arch": "resnet18"},
}
SIGNAL_MODELS = ("cnn1d",)  # take 1-D signals (L,), not images


@pytest.mark.parametrize("name", models.MODELS)
def test_every_model_builds_from_config_and_trains_a_step(name: str, request: pytest.FixtureRequest) -> None:
    if name == "torchvision" and not _torchvision_works():
        request.getfixturevalue("fake_torchvision")
    if name == "timm" and not _timm_works():
        request.getfixturevalue("fake_timm")
    cfg = config.from_dict({"model": {"name": name, **MODEL_SECTIONS[name]}})
    assert set(MODEL_SECTIONS[name]) == set(models.model_keys(name))  # every key it takes is exercised
    init = "default" if name == "torchvision" else "kaiming_normal"  # the stand-in's lazy layer has no shape yet
    shape = (40,) if name in SIGNAL_MODELS else (3, 16, 16)
    m = models.build(cfg.model, shape, 5, 0.1, init)
    out = m(torch.randn(2, *shape))
    assert out.shape == (2, 5)
    out.square().mean().backward()
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in m.parameters())


def test_unknown_model_is_one_line_with_close_match() -> None:
    with pytest.raises(ConfigError) as info:
        config.from_dict({"model": {"name": "resnet19"}})
    assert str(info.value) == "<config>: model.name: unknown model 'resnet19' (did you mean 'resnet'?); allowed: " + \
        ", ".join(sorted(models.MODELS)) + " (or model.factory)"
    with pytest.raises(ConfigError, match=r"^<config>: init: unknown init 'he'; allowed: default, kaiming_normal, "):
        models.init_weights(torch.nn.Linear(2, 2), "he")


def test_build_for_applies_model_keys() -> None:
    cfg = config.from_dict({"model": {"name": "resnet", "depth": 8}}).model
    small = models.build_for(cfg, Settings({"lr": 0.1, "model.width": 8}), (3, 16, 16), 10, 0.0, "default")
    big = models.build_for(cfg, Settings({"model.width": 32}), (3, 16, 16), 10, 0.0, "default")
    assert n_params(big) > 10 * n_params(small)
    mlp = config.from_dict({"model": {"name": "mlp", "kwargs": {"depth": 3}}}).model
    lin = [m for m in models.build_for(mlp, Settings({}), (4,), 2, 0.0, "default").modules()
           if isinstance(m, torch.nn.Linear)]
    assert len(lin) == 4  # kwargs still reach the builder
    deep = Settings({"model.depth": 1, "model.hidden": 7})
    lin = [m for m in models.build_for(mlp, deep, (4,), 2, 0.0, "default").modules()
           if isinstance(m, torch.nn.Linear)]
    assert len(lin) == 2 and lin[0].out_features == 7  # a named key wins over kwargs
    cnn = config.from_dict({"model": {"name": "cnn"}}).model
    m = models.build_for(cnn, Settings({"model.channels": [4, 6]}), (1, 8, 8), 3, 0.0, "default")
    assert [c.out_channels for c in m.modules() if isinstance(c, torch.nn.Conv2d)] == [4, 6]


def test_build_for_rejects_keys_given_by_hand() -> None:
    cfg = config.from_dict({"model": {"name": "resnet"}}).model
    with pytest.raises(ConfigError, match=r"model\.widht: resnet does not take widht \(did you mean 'width'\?\)"):
        models.build_for(cfg, Settings({"model.widht": 8}), (3, 16, 16), 10, 0.0, "default")
    with pytest.raises(ConfigError, match=r"model\.depth: resnet depth must be 6n\+2.*got 10"):
        models.build_for(cfg, Settings({"model.depth": 10}), (3, 16, 16), 10, 0.0, "default")


def test_factory_model_takes_its_own_searched_arguments() -> None:
    cfg = config.from_dict({"model": {"factory": "tests.factories:small_net", "name": None},
                            "space": {"model.width": {"type": "categorical", "choices": [4, 64]}}})
    m4, m64 = (models.build_for(cfg.model, Settings({"model.width": w}), (1, 8, 8), 10, 0.0, "default")
               for w in (4, 64))
    assert n_params(m64) > 10 * n_params(m4)
    with pytest.raises(ConfigError, match=r"space\.model\.depth: tests\.factories:small_net does not take depth; "
                                          r"it takes width"):
        config.from_dict({"model": {"factory": "tests.factories:small_net", "name": None},
                          "space": {"model.depth": {"type": "int", "low": 1, "high": 3}}})


def _torchvision_works() -> bool:
    try:
        import torchvision  # noqa: F401
    except Exception:
        return False
    return True


def _timm_works() -> bool:
    try:
        import timm  # noqa: F401
    except Exception:
        return False
    return True


@pytest.mark.skipif(_timm_works(), reason="this machine has a working timm")
def test_timm_missing_or_broken_names_the_extra() -> None:
    """Here timm is installed without a torchvision it can import (or not at all): one line naming the extra."""
    with pytest.raises(ConfigError, match=r"^<config>: model\.arch: timm (is not installed|cannot import torchvision|"
                                          r"is installed but cannot be imported).*(pip install 'autotune\[timm\]'|"
                                          r"install the torchvision release built for torch)"):
        config.from_dict({"model": {"name": "timm", "arch": "resnet18"}})


def test_timm_by_name_random_init_any_channels_never_a_download(fake_timm: list) -> None:
    m = models.build(config.from_dict({"model": {"name": "timm", "arch": "resnet34"}}).model, (1, 8, 8), 10, 0.2,
                     "default")
    assert m(torch.randn(2, 1, 8, 8)).shape == (2, 10)
    assert fake_timm == [("resnet34", {"pretrained": False, "num_classes": 10, "in_chans": 1, "drop_rate": 0.2})]


def test_timm_config_errors_are_one_line(fake_timm: list) -> None:
    with pytest.raises(ConfigError, match=r"^<config>: model\.arch: timm needs an arch, e.g\. resnet18 \(a name "
                                          r"from timm\.list_models\(\)\)$"):
        config.from_dict({"model": {"name": "timm"}})
    with pytest.raises(ConfigError, match=r"^<config>: model\.arch: unknown timm arch 'resnet19' \(did you mean "
                                          r"'resnet18'\?\); e\.g\. resnet18, resnet34 \(3 in all"):
        config.from_dict({"model": {"name": "timm", "arch": "resnet19"}})
    with pytest.raises(ConfigError, match=r"^<config>: model\.kwargs\.pretrained: autotune never downloads weights"):
        config.from_dict({"model": {"name": "timm", "arch": "resnet18", "kwargs": {"pretrained": True}}})
    with pytest.raises(ConfigError, match=r"model\.name: timm's models take images \(C, H, W\); got shape \(40,\)"):
        models.build(config.from_dict({"model": {"name": "timm", "arch": "resnet18"}}).model, (40,), 3, 0.0, "default")


@pytest.mark.skipif(_torchvision_works(), reason="this machine has a working torchvision")
def test_torchvision_missing_names_the_pip_command() -> None:
    with pytest.raises(ConfigError, match=r"model\.(name|arch): torchvision (is not installed: pip install "
                                          r"'autotune\[vision\]'|is installed but cannot be imported)"):
        config.from_dict({"model": {"name": "torchvision", "arch": "resnet18"}})


def test_torchvision_that_cannot_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A torchvision wheel built for another torch raises on import: one line that says so."""
    pkg = tmp_path / "torchvision"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('operator torchvision::nms does not exist')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        monkeypatch.delitem(sys.modules, mod)
    with pytest.raises(ConfigError, match=r"torchvision is installed but cannot be imported \(RuntimeError: operator "
                                          r"torchvision::nms does not exist\); install the torchvision release "
                                          r"built for torch"):
        models.torchvision((3, 32, 32), 10, "resnet18")


def test_torchvision_builds_by_name_without_weights(fake_torchvision: None) -> None:
    """The glue to torchvision's registry: list_models for the names, get_model(weights=None) to build.
    (The real torchvision runs in the GPU check where it is installed; here a stand-in package with
    the same two functions.)"""
    cfg = config.from_dict({"data": {"name": "synthetic", "shape": [3, 8, 8]},
                            "model": {"name": "torchvision", "arch": "resnet18"}})
    m = models.build(cfg.model, (3, 8, 8), 7, 0.0, "default")
    assert m(torch.randn(2, 3, 8, 8)).shape == (2, 7)
    import torchvision.models as tvm

    assert tvm.CALLS == [("resnet18", {"weights": None, "num_classes": 7})]
    with pytest.raises(ConfigError, match=r"model\.arch: unknown torchvision arch 'resnet19' \(did you mean "
                                          r"'resnet18'\?\)"):
        config.from_dict({"model": {"name": "torchvision", "arch": "resnet19"}})
    with pytest.raises(ConfigError, match=r"model\.kwargs\.weights: autotune never downloads weights"):
        config.from_dict({"model": {"name": "torchvision", "arch": "resnet18", "kwargs": {"weights": "DEFAULT"}}})
    with pytest.raises(ConfigError, match=r"model\.name: torchvision's models take 3-channel images"):
        models.build(cfg.model, (1, 8, 8), 7, 0.0, "default")
    with pytest.raises(ConfigError, match=r"model\.arch: torchvision needs an arch"):
        config.from_dict({"model": {"name": "torchvision"}})


@pytest.mark.parametrize("shape", [(40,), (3, 40), (1,), (5, 7)])
def test_cnn1d_any_signal_length_and_depth(shape: tuple[int, ...]) -> None:
    for depth in (1, 3, 6):  # past the length's halvings the blocks keep stride 1
        m = models.cnn1d(shape, 10, width=8, depth=depth)
        assert m(torch.randn(3, *shape)).shape == (3, 10)
        assert len([c for c in m.modules() if isinstance(c, torch.nn.Conv1d)]) == depth
    with pytest.raises(ConfigError, match=r"cnn1d needs 1-D signals \(L,\) or \(C, L\); got shape \(1, 8, 8\)"):
        models.cnn1d((1, 8, 8), 10)


def test_searched_model_name_builds_each_architecture() -> None:
    cfg = config.from_dict({"data": {"name": "synthetic", "shape": [40]}, "space": {
        "model.name": {"type": "categorical", "choices": ["cnn1d", "mlp"]},
        "model.width": {"type": "categorical", "choices": [4, 8], "when": {"model.name": "cnn1d"}},
        "model.hidden": {"type": "categorical", "choices": [16, 32], "when": {"model.name": "mlp"}},
        "model.depth": {"type": "int", "low": 1, "high": 3}}})
    cnn = models.build_for(cfg.model, Settings({"model.name": "cnn1d", "model.width": 8, "model.depth": 2}), (40,),
                           10, 0.0, "default")
    assert [c.out_channels for c in cnn.modules() if isinstance(c, torch.nn.Conv1d)] == [8, 8]
    mlp = models.build_for(cfg.model, Settings({"model.name": "mlp", "model.hidden": 16, "model.depth": 3}), (40,),
                           10, 0.0, "default")
    assert [m.out_features for m in mlp.modules() if isinstance(m, torch.nn.Linear)] == [16, 16, 16, 10]
    with pytest.raises(ConfigError, match=r"model\.width: mlp does not take width"):
        models.build_for(cfg.model, Settings({"model.name": "mlp", "model.width": 8}), (40,), 10, 0.0, "default")
