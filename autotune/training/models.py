"""Model builders (`cnn`, `cnn1d`, `mlp`, `resnet`, `torchvision`, `timm`, a user factory) and weight-initialization
schemes.

`MODELS` is the registry: name -> builder. A builder takes `(input_shape, n_classes, <architecture
keys>, dropout)`; the architecture keys it takes (`model_keys`) are read from its signature, so the
config's allowed names and keys come from here and nowhere else. `build_for` builds the model for a
sampled point: the `model:` section with the trial's `model.KEY` values applied.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from autotune.core import ConfigError, load_factory, lookup, suggest
from autotune.spec import MODEL_PREFIX, ModelConfig, Settings
from autotune.training.data.registry import factory_kwargs

# Keys of the model section that describe the architecture (fixed in `model:` or searched as `model.KEY`).
MODEL_KEYS = ("channels", "hidden", "depth", "width", "arch")
KEY_RULES = {"channels": "a non-empty list of positive integers", "hidden": "an integer >= 1",
             "depth": "an integer >= 1", "width": "an integer >= 1", "arch": "a torchvision or timm model name"}
VISION_PIP = "pip install 'autotune[vision]'"
TIMM_PIP = "pip install 'autotune[timm]'"
NO_DOWNLOAD = ("weights", "pretrained", "weights_backbone", "pretrained_cfg", "pretrained_cfg_overlay")


def cnn(input_shape: tuple[int, ...], n_classes: int, channels: tuple[int, ...] = (32, 64), hidden: int = 128,
        dropout: float = 0.0) -> nn.Module:
    """Conv-BN-ReLU blocks, each halving the image while it is at least 2 pixels, then an MLP head."""
    if len(input_shape) != 3:
        raise ConfigError(None, "model.name", f"cnn needs image inputs (C, H, W); got shape {input_shape}: use mlp")
    c, h, w = input_shape
    layers: list[nn.Module] = []
    for out in channels:
        layers += [nn.Conv2d(c, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
        if min(h, w) >= 2:
            layers.append(nn.MaxPool2d(2))
            h, w = h // 2, w // 2
        c = out
    head = [nn.Flatten(), nn.Linear(c * h * w, hidden), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(hidden, n_classes)]
    return nn.Sequential(*layers, *head)


def cnn1d(input_shape: tuple[int, ...], n_classes: int, width: int = 32, depth: int = 3,
          dropout: float = 0.0) -> nn.Module:
    """`depth` Conv1d-BN-ReLU blocks of `width` channels, each of stride 2 while the signal is at least 2 long
    (the first with kernel 5, then 3), then a linear head: the CNN of the MNIST-1D paper (Greydanus 2020) with
    batch norm. Takes 1-D signals: flat features (L,) as one channel, or (C, L)."""
    if len(input_shape) not in (1, 2):
        raise ConfigError(None, "model.name", f"cnn1d needs 1-D signals (L,) or (C, L); got shape {input_shape}: "
                                              "use cnn for images")
    c, n = (1, input_shape[0]) if len(input_shape) == 1 else input_shape
    layers: list[nn.Module] = [nn.Unflatten(1, (c, n))] if len(input_shape) == 1 else []
    for i in range(depth):
        k, stride = (5 if i == 0 else 3), (2 if n >= 2 else 1)
        layers += [nn.Conv1d(c, width, k, stride=stride, padding=k // 2, bias=False), nn.BatchNorm1d(width),
                   nn.ReLU(inplace=True)]
        c, n = width, (n + 2 * (k // 2) - k) // stride + 1
    return nn.Sequential(*layers, nn.Flatten(), nn.Dropout(dropout), nn.Linear(c * n, n_classes))


def mlp(input_shape: tuple[int, ...], n_classes: int, hidden: int = 128, depth: int = 2,
        dropout: float = 0.0) -> nn.Module:
    """`depth` hidden layers of width `hidden` on the flattened input."""
    n_in = math.prod(input_shape)
    layers: list[nn.Module] = [nn.Flatten()]
    for _ in range(depth):
        layers += [nn.Linear(n_in, hidden), nn.ReLU(inplace=True), nn.Dropout(dropout)]
        n_in = hidden
    layers.append(nn.Linear(n_in, n_classes))
    return nn.Sequential(*layers)


# ---------------------------------------------------------------- resnet for small images


def _conv_bn(c_in: int, c_out: int, k: int, stride: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, bias=False), nn.BatchNorm2d(c_out)]


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers and a shortcut (a strided 1x1 conv-BN where the shape changes).

    The layers sit in `nn.Sequential`s and the residual add is a `FloatFunctional`, so compression's
    conv-bn-relu fusion and static int8 quantization work on it as on the plain nets."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(*_conv_bn(c_in, c_out, 3, stride), nn.ReLU(inplace=True),
                                  *_conv_bn(c_out, c_out, 3, 1))
        self.shortcut = nn.Sequential(*_conv_bn(c_in, c_out, 1, stride)) if stride != 1 or c_in != c_out \
            else nn.Identity()
        self.add = torch.ao.nn.quantized.FloatFunctional()
        nn.init.zeros_(self.body[-1].weight)  # each block starts as the identity: deep nets train from step one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.add.add_relu(self.body(x), self.shortcut(x))


def resnet(input_shape: tuple[int, ...], n_classes: int, depth: int = 20, width: int = 16,
           dropout: float = 0.0) -> nn.Module:
    """The CIFAR ResNet of He et al. (2016): a 3x3 stem, three stages of (depth - 2) / 6 basic blocks at
    width, 2 x width and 4 x width channels (the last two halve the image), global average pooling, a
    linear head. depth 20 / width 16 is ResNet-20 (0.27 M parameters); any channel count, any H, W."""
    if len(input_shape) != 3:
        raise ConfigError(None, "model.name", f"resnet needs image inputs (C, H, W); got shape {input_shape}: "
                                              "use mlp")
    why = _resnet_depth_error(depth)
    if why is not None:
        raise ConfigError(None, "model.depth", why)
    n = (depth - 2) // 6
    c = input_shape[0]
    layers: list[nn.Module] = [nn.Sequential(*_conv_bn(c, width, 3, 1), nn.ReLU(inplace=True))]
    c = width
    for stage in range(3):
        out = width * 2 ** stage
        for i in range(n):
            layers.append(BasicBlock(c, out, 2 if stage > 0 and i == 0 else 1))
            c = out
    head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout), nn.Linear(c, n_classes)]
    return nn.Sequential(*layers, *head)


def _resnet_depth_error(depth: Any) -> str | None:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        return f"resnet depth must be 6n+2: 8, 14, 20, 32, 44, 56, 110, ...; got {depth!r}"
    return None


# ---------------------------------------------------------------- torchvision, an optional extra


def _torchvision_models() -> Any:
    """`torchvision.models`, or a ConfigError naming the install command; nothing is downloaded."""
    try:
        import torchvision.models as tvm
    except ImportError:
        raise ConfigError(None, "model.name", f"torchvision is not installed: {VISION_PIP}") from None
    except Exception as e:  # e.g. a torchvision wheel built for another torch
        raise ConfigError(None, "model.name", f"torchvision is installed but cannot be imported ({type(e).__name__}: "
                                              f"{str(e).splitlines()[0] if str(e) else ''}); install the torchvision "
                                              f"release built for torch {torch.__version__}") from None
    return tvm


def torchvision(input_shape: tuple[int, ...], n_classes: int, arch: str = "resnet18",
                dropout: float = 0.0) -> nn.Module:
    """A classification model of torchvision by name, randomly initialized (`weights=None`: never a
    download; warm-start from a local file with model.checkpoint). `dropout` is the architecture's own."""
    tvm = _torchvision_models()
    if arch not in tvm.list_models(module=tvm):
        raise ConfigError(None, "model.arch", _arch_message(arch, tvm))
    if len(input_shape) != 3 or input_shape[0] != 3:
        raise ConfigError(None, "model.name", f"torchvision's models take 3-channel images (3, H, W); got "
                                              f"{input_shape}: use resnet or cnn")
    return tvm.get_model(arch, weights=None, num_classes=n_classes)


def _arch_message(arch: Any, tvm: Any) -> str:
    names = tvm.list_models(module=tvm)
    return f"unknown torchvision arch {arch!r}{suggest(str(arch), names)}; classification models: " \
           f"{', '.join(names[:12])}, ... ({len(names)} in all: torchvision.models.list_models())"


# ---------------------------------------------------------------- timm, an optional extra


def _timm() -> Any:
    """`timm`, or a ConfigError naming the install command (timm needs a torchvision built for this torch)."""
    try:
        import timm as timm_module
    except ImportError as e:
        missing = getattr(e, "name", None) or "timm"
        what = "timm is not installed" if missing == "timm" else f"timm cannot import {missing}"
        raise ConfigError(None, "model.name", f"{what}: {TIMM_PIP} (with the torchvision release built for torch "
                                              f"{torch.__version__})") from None
    except Exception as e:  # e.g. a torchvision wheel built for another torch, which timm imports
        raise ConfigError(None, "model.name", f"timm is installed but cannot be imported ({type(e).__name__}: "
                                              f"{str(e).splitlines()[0] if str(e) else ''}); install the torchvision "
                                              f"release built for torch {torch.__version__}") from None
    return timm_module


def timm(input_shape: tuple[int, ...], n_classes: int, arch: str = "resnet18", dropout: float = 0.0,
         **kwargs: Any) -> nn.Module:
    """A timm architecture by name (`timm.create_model`), randomly initialized (`pretrained=False`: never a
    download; transfer learning from a local file with model.checkpoint), for images of any channel count
    (`in_chans`); `dropout` is its classifier's `drop_rate`, `kwargs` go to create_model."""
    tm = _timm()
    if not tm.is_model(arch):
        raise ConfigError(None, "model.arch", _timm_arch_message(arch, tm))
    if len(input_shape) != 3:
        raise ConfigError(None, "model.name", f"timm's models take images (C, H, W); got shape {input_shape}: use "
                                              "mlp or cnn1d")
    return tm.create_model(arch, pretrained=False, num_classes=n_classes, in_chans=input_shape[0],
                           drop_rate=dropout, **kwargs)


def _timm_arch_message(arch: Any, tm: Any) -> str:
    near = tm.list_models(f"*{str(arch)[:4]}*")[:8] if isinstance(arch, str) and arch else []
    return f"unknown timm arch {arch!r}{suggest(str(arch), tm.list_models())}; e.g. " \
           f"{', '.join(near or ['resnet18', 'efficientnet_b0', 'mobilenetv3_small_100', 'vit_tiny_patch16_224'])}" \
           f" ({len(tm.list_models())} in all: timm.list_models())"


MODELS: dict[str, Callable[..., nn.Module]] = {"cnn": cnn, "cnn1d": cnn1d, "mlp": mlp, "resnet": resnet,
                                               "torchvision": torchvision, "timm": timm}


def model_keys(name: str) -> tuple[str, ...]:
    """The architecture keys a registered model takes, from its builder's signature."""
    return tuple(p for p in inspect.signature(MODELS[name]).parameters if p in MODEL_KEYS)


def factory_keys(fn: Callable[..., Any]) -> tuple[str, ...] | None:
    """The keyword arguments a user's model factory takes beyond what autotune always offers
    (None: it takes **kwargs, so any)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return tuple(p for p in params if p not in ("input_shape", "n_classes", "dropout"))


def check_value(name: str | None, key: str, value: Any) -> str | None:
    """Why `value` is not a valid `key` for model `name` (None: it is)."""
    if key == "channels":
        ok = isinstance(value, (list, tuple)) and value and all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in value)
        return None if ok else f"channels must be {KEY_RULES[key]}; got {value!r}"
    if key == "arch":
        if not isinstance(value, str) or not value:
            return f"arch must be {KEY_RULES[key]}; got {value!r}"
        if name == "torchvision":
            try:
                tvm = _torchvision_models()
            except ConfigError as e:
                return e.message
            if value not in tvm.list_models(module=tvm):
                return _arch_message(value, tvm)
        if name == "timm":
            try:
                tm = _timm()
            except ConfigError as e:
                return e.message
            if not tm.is_model(value):
                return _timm_arch_message(value, tm)
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"{key} must be {KEY_RULES[key]}; got {value!r}"
    if name == "resnet" and key == "depth":
        return _resnet_depth_error(value)
    return None


# ---------------------------------------------------------------- weight initialization


def _xavier_uniform(w: torch.Tensor) -> None:
    nn.init.xavier_uniform_(w)


def _xavier_normal(w: torch.Tensor) -> None:
    nn.init.xavier_normal_(w)


def _kaiming_uniform(w: torch.Tensor) -> None:
    nn.init.kaiming_uniform_(w, nonlinearity="relu")


def _kaiming_normal(w: torch.Tensor) -> None:
    nn.init.kaiming_normal_(w, nonlinearity="relu")


def _orthogonal(w: torch.Tensor) -> None:
    nn.init.orthogonal_(w)


INITS: dict[str, Callable[[torch.Tensor], None] | None] = {
    "default": None,  # PyTorch's own per-layer defaults
    "xavier_uniform": _xavier_uniform,
    "xavier_normal": _xavier_normal,
    "kaiming_uniform": _kaiming_uniform,
    "kaiming_normal": _kaiming_normal,
    "orthogonal": _orthogonal,
}


def init_weights(model: nn.Module, scheme: str) -> None:
    """Re-initialize every conv and linear weight with `scheme`; biases to zero."""
    fn = lookup(INITS, scheme, None, "init", "init")
    if fn is None:
        return
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)):
                fn(m.weight)
                if m.bias is not None:
                    m.bias.zero_()


# ---------------------------------------------------------------- building


def build(cfg: ModelConfig, input_shape: tuple[int, ...], n_classes: int, dropout: float, init: str,
          file: str = "<config>") -> nn.Module:
    """The model a config names, initialized with `init`. `n_classes` is the number of outputs (classes,
    or regression targets). Architecture keys left null take the builder's defaults; `kwargs` go to the
    builder too (a key given both ways takes the named key's value)."""
    arch = {k: tuple(v) if k == "channels" else v for k, v in cfg.model_dump(include=set(MODEL_KEYS)).items()
            if v is not None}
    if cfg.factory is not None:
        fn = load_factory(cfg.factory, file, "model.factory")
        offered: dict[str, Any] = {"input_shape": input_shape, "n_classes": n_classes, "dropout": dropout,
                                   **cfg.kwargs, **arch}
        model = fn(**factory_kwargs(fn, offered))
        if not isinstance(model, nn.Module):
            raise ConfigError(file, "model.factory", f"must return a torch.nn.Module; got {type(model).__name__}")
    else:
        builder = lookup(MODELS, str(cfg.name), file, "model.name", "model", " (or model.factory)")
        try:
            model = builder(input_shape, n_classes, dropout=dropout, **{**cfg.kwargs, **arch})
        except ConfigError as e:
            raise ConfigError(file, e.key_path, e.message) from None
    init_weights(model, init)
    return model


def overrides(settings: Settings) -> dict[str, Any]:
    """The `model.KEY` values of a sampled point, without the prefix (channels as a tuple)."""
    out = {k[len(MODEL_PREFIX):]: v for k, v in settings.items() if k.startswith(MODEL_PREFIX)}
    if isinstance(out.get("channels"), list):
        out["channels"] = tuple(out["channels"])
    return out


def build_for(cfg: ModelConfig, settings: Settings, input_shape: tuple[int, ...], n_outputs: int,
              dropout: float, init: str, file: str = "<config>") -> nn.Module:
    """The model for one sampled point: `cfg` with the point's `model.KEY` values applied, then `build`.
    A factory model gets searched keys outside MODEL_KEYS as keyword arguments."""
    over = overrides(settings)
    if "name" in over:  # space.model.name: the architecture itself is searched
        cfg = cfg.model_copy(update={"name": over.pop("name")})
    takes = factory_keys(load_factory(cfg.factory, file, "model.factory")) if cfg.factory is not None \
        else model_keys(str(cfg.name))
    for key, value in over.items():  # config has checked searched keys; `params` given by hand come here too
        if takes is not None and key not in takes:
            raise ConfigError(file, MODEL_PREFIX + key, f"{cfg.name or cfg.factory} does not take {key}"
                                                        f"{suggest(key, takes)}; it takes "
                                                        f"{', '.join(takes) or 'no architecture keys'}")
        why = check_value(cfg.name, key, value) if key in MODEL_KEYS and cfg.factory is None else None
        if why is not None:
            raise ConfigError(file, MODEL_PREFIX + key, why)
    known = {k: v for k, v in over.items() if k in MODEL_KEYS}
    extra = {k: v for k, v in over.items() if k not in MODEL_KEYS}
    cfg = cfg.model_copy(update={**known, "kwargs": {**cfg.kwargs, **extra}} if extra else known)
    return build(cfg, input_shape, n_outputs, dropout, init, file)
