"""Compression of a trained model and what it costs: pruning, quantization, size and inference latency.

The trainer calls `compress_and_measure` once, after its epoch loop. The steps, in order:
1. prune (`l1_unstructured`: global magnitude over every conv/linear weight; `ln_structured`:
   whole conv channels and linear rows, L2 norm, per layer, never the classifier's rows), then
   fine-tune with the masks held, then make the masks permanent (`prune.remove`); structured
   pruning of an `nn.Sequential` net (the built-in cnn and mlp) also cuts the zeroed channels out
   of the layers, so the model really is smaller and faster;
2. quantize (`dynamic_int8`: Linear weights int8, activations quantized on the fly;
   `static_int8`: conv and linear int8 with activations calibrated on training batches, eager-mode
   torch.ao on the x86/fbgemm engine, conv+bn+relu fused first; `qat: true` fine-tunes the trained
   model with fake quantization instead of calibrating; `bf16` / `fp16`: the whole model cast);
3. measure on the inference device: accuracy, serialized size, non-zero parameters and the median
   latency of repeated batches after warm-up.

Transfer learning (`model.checkpoint`, `freeze`) also lives here: `load_checkpoint`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import itertools
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.utils import prune

from . import accel
from .config import DistillConfig, ModelConfig, RunConfig, resolve_path
from .errors import ConfigError, TrialStopped

INT8_MODES = ("dynamic_int8", "static_int8")
CAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
CALIBRATION_BATCHES = 8  # training batches the static int8 observers see
LATENCY_WARMUP = 3
LATENCY_REPEATS = 15
FINETUNE_LR_FACTOR = 0.1  # fine-tuning after pruning runs at a tenth of the peak lr, constant


# ---------------------------------------------------------------- what can run where


def quantized_engine() -> str | None:
    """The CPU int8 engine to use: x86 (fbgemm + onednn) where built, else fbgemm, else qnnpack (ARM)."""
    engines = torch.backends.quantized.supported_engines
    for name in ("x86", "fbgemm", "qnnpack"):
        if name in engines:
            return name
    return None


def infer_device(settings: dict[str, Any], train_dev: torch.device) -> torch.device:
    """`infer_device: auto` is the training device, except int8, whose kernels exist on CPU only."""
    name = settings["infer_device"]
    if name == "auto":
        return torch.device("cpu") if settings["quantize"] in INT8_MODES else train_dev
    return accel.resolve_device(name)


def unsupported(settings: dict[str, Any], train_dev: torch.device) -> tuple[str, str] | None:
    """(setting, why) when this combination of compression settings cannot run here, else None."""
    q, qat, pm = settings["quantize"], settings["qat"], settings["prune_method"]
    if q in INT8_MODES:
        if quantized_engine() is None:
            return "quantize", f"{q} needs a quantized engine; this torch build has none (supported_engines is " \
                               f"{torch.backends.quantized.supported_engines})"
        dev = infer_device(settings, train_dev)
        if dev.type != "cpu":
            return "infer_device", f"{q} runs on CPU only (torch's int8 kernels); got infer_device {dev}"
    if qat:
        if q != "static_int8":
            return "qat", f"quantization-aware training produces a static int8 model: needs quantize static_int8; " \
                          f"got quantize {q}"
        if pm == "l1_unstructured" and settings["prune_amount"] > 0:
            return "qat", "qat with l1_unstructured is not supported: QAT fine-tuning would regrow the pruned " \
                          "weights; use ln_structured (its channels are cut out first) or post-training static_int8"
    if q in CAST_DTYPES:
        dev = infer_device(settings, train_dev)
        why = _cast_error(str(dev), q)
        if why is not None:
            return "quantize", f"{q} inference on {dev}: {why}"
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch.ao's eager quantization warns that it is deprecated (it still ships and works): noted in the README."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization.*deprecated.*")
        warnings.filterwarnings("ignore", message=r".*quant_min and quant_max.*")
        warnings.filterwarnings("ignore", message=r".*reduce_range.*")
        warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions.*")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.ao.*")
        yield


@functools.lru_cache(maxsize=8)
def _cast_error(device_str: str, mode: str) -> str | None:
    """None if a conv+bn+linear forward runs in that dtype on that device, else why not."""
    dt = CAST_DTYPES[mode]
    dev = torch.device(device_str)
    try:
        m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 4 * 4, 3)).to(dev, dt).eval()
        with torch.inference_mode():
            m(torch.randn(2, 1, 4, 4, device=dev, dtype=dt))
    except Exception as e:  # the exact error differs by device and build
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def preflight(cfg: RunConfig) -> None:
    """Fixed compression settings that cannot work are a ConfigError before any trial runs."""
    file = Path(cfg.source).name
    fixed = cfg.fixed()
    searched = set(cfg.space)
    try:
        dev = accel.resolve_device(fixed["device"])
        if fixed["infer_device"] != "auto":
            accel.resolve_device(fixed["infer_device"])
    except Exception as e:
        raise ConfigError(file, "train.infer_device", str(e)) from None
    freeze_set = "freeze" in searched or fixed["freeze"] != "none"
    if freeze_set and cfg.model.checkpoint is None:
        raise ConfigError(file, "space.freeze" if "freeze" in searched else "train.freeze",
                          "freeze needs model.checkpoint: freezing untrained layers keeps them random")
    if cfg.distill is not None and cfg.distill.teacher == "best":
        pass  # resolved once the study is open (study.resolve_teacher): the best trial is trained then
    elif cfg.distill is not None:
        if not resolve_path(cfg.distill.teacher, cfg.source).is_file():
            raise ConfigError(file, "distill.teacher", f"no such file: {cfg.distill.teacher}")
        from . import data

        ds = data.load(cfg.data, cfg.source)
        load_teacher(cfg.distill, cfg.model, ds.input_shape, ds.n_classes, torch.device("cpu"), cfg.source)
    if cfg.model.checkpoint is not None:  # a checkpoint that does not fit fails here, not in every trial
        from . import data, models

        ds = data.load(cfg.data, cfg.source, cfg.task)
        model = models.build(cfg.model, ds.input_shape, ds.n_outputs, 0.0, "default", file)
        freezes = cfg.space["freeze"].choices or () if "freeze" in searched else (fixed["freeze"],)
        for freeze in freezes:
            load_checkpoint(copy.deepcopy(model), cfg.model.checkpoint, cfg.source, str(freeze))
    # Every combination the space can draw (float ranges by their ends): if none can run, say so now;
    # if some can, a drawn one that cannot becomes a pruned trial (stop_reason unsupported).
    options: dict[str, list[Any]] = {}
    for k in ("quantize", "qat", "prune_method", "prune_amount"):
        spec = cfg.space.get(k)
        options[k] = [fixed[k]] if spec is None else list(spec.choices) if spec.choices is not None else \
            [spec.low, spec.high]
    problems = [unsupported({**fixed, **dict(zip(options, values))}, dev)
                for values in itertools.product(*options.values())]
    if all(p is not None for p in problems):
        name, why = next(p for p in problems if p is not None)
        every = " (so does every combination the space can draw)" if len(problems) > 1 else ""
        raise ConfigError(file, f"{'space' if name in searched else 'train'}.{name}", why + every)


# ---------------------------------------------------------------- transfer learning


def load_checkpoint(model: nn.Module, path: str, source: str = "<config>", freeze: str = "none",
                    key: str = "model.checkpoint") -> None:
    """Warm-start `model` from a saved state dict; every missing, unexpected or mis-shaped key is named."""
    file = Path(source).name
    p = resolve_path(path, source)
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
        raise ConfigError(file, key, f"cannot read {path} as a state dict: {type(e).__name__}: "
                                                    f"{first}") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(file, key, f"{path} is not a state dict (a mapping of names to tensors)")
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shape = [f"{k} (checkpoint {list(state[k].shape)}, model {list(own[k].shape)})" for k in own
             if k in state and state[k].shape != own[k].shape]
    problems = []
    if missing:
        problems.append("missing " + ", ".join(missing))
    if unexpected:
        problems.append("unexpected " + ", ".join(unexpected))
    if shape:
        problems.append("shape mismatch " + ", ".join(shape))
    if problems:
        raise ConfigError(file, key, f"{path} does not fit the model: " + "; ".join(problems))
    model.load_state_dict(state)
    apply_freeze(model, freeze, file)


def apply_freeze(model: nn.Module, freeze: str, file: str = "<config>") -> None:
    """`features`: conv and batch-norm layers; `all_but_head`: everything but the last Linear."""
    if freeze == "none":
        return
    if freeze == "features":
        kinds = (nn.modules.conv._ConvNd, nn.modules.batchnorm._BatchNorm)
        frozen = [m for m in model.modules() if isinstance(m, kinds)]
        if not frozen:
            raise ConfigError(file, "freeze", "features: the model has no conv or batch-norm layers; "
                                              "use all_but_head")
    elif freeze == "all_but_head":
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        if not linears:
            raise ConfigError(file, "freeze", "all_but_head: the model has no Linear head")
        head = linears[-1]
        frozen = [m for m in model.modules() if m is not head and not list(m.children())]
    else:
        raise ConfigError(file, "freeze", f"unknown freeze {freeze!r}; allowed: all_but_head, features, none")
    for m in frozen:
        for p in m.parameters(recurse=False):
            p.requires_grad_(False)
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.momentum = 0.0  # frozen running statistics too: momentum 0 keeps them as loaded


def load_teacher(distill: DistillConfig, student: ModelConfig, input_shape: tuple[int, ...], n_classes: int,
                 dev: torch.device, source: str = "<config>", channels_last: bool = False) -> nn.Module:
    """The distillation teacher: `teacher_model` (default: the student's section) loaded from `teacher`, frozen."""
    from . import models

    file = Path(source).name
    arch = (distill.teacher_model or student).model_copy(update={"checkpoint": None})
    teacher = models.build(arch, input_shape, n_classes, 0.0, "default", file)
    load_checkpoint(teacher, distill.teacher, source, "none", key="distill.teacher")
    teacher = teacher.to(dev).eval()
    if channels_last:
        teacher = teacher.to(memory_format=torch.channels_last)
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def distill_loss(label_loss: torch.Tensor, logits: torch.Tensor, teacher: nn.Module, xb: torch.Tensor,
                 distill: DistillConfig) -> torch.Tensor:
    """(1 - alpha) x label loss + alpha x T^2 x KL(teacher || student) at temperature T (Hinton et al.)."""
    t = distill.temperature
    with torch.no_grad():
        soft = nn.functional.softmax(teacher(xb).float() / t, dim=1)
    kd = nn.functional.kl_div(nn.functional.log_softmax(logits / t, dim=1), soft, reduction="batchmean") * t * t
    return (1 - distill.alpha) * label_loss + distill.alpha * kd


# ---------------------------------------------------------------- pruning


def _prunable(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, (nn.modules.conv._ConvNd, nn.Linear))]


def prune_model(model: nn.Module, method: str, amount: float) -> list[nn.Module]:
    """Attach pruning masks (not yet permanent); returns the pruned modules (for `make_permanent`)."""
    if method == "none" or amount <= 0:
        return []
    layers = _prunable(model)
    if method == "l1_unstructured":
        prune.global_unstructured([(m, "weight") for m in layers], pruning_method=prune.L1Unstructured,
                                  amount=amount)
        return layers
    if method == "ln_structured":
        pruned: list[nn.Module] = []
        head = layers[-1] if layers and isinstance(layers[-1], nn.Linear) else None
        for m in layers:
            if m is head:  # its rows are the classes
                continue
            n_out = m.weight.shape[0]
            k = min(int(round(amount * n_out)), n_out - 1)  # keep at least one channel
            if k < 1:
                continue
            prune.ln_structured(m, "weight", amount=k, n=2, dim=0)
            if m.bias is not None:  # a zero channel must output exactly zero, so it can be cut out
                prune.custom_from_mask(m, "bias", m.weight_mask.flatten(1)[:, 0])
            pruned.append(m)
        _mask_following_norms(model, pruned)
        return pruned
    raise ValueError(f"unknown prune_method {method!r}")


def _mask_following_norms(model: nn.Module, pruned: list[nn.Module]) -> None:
    """A batch norm after a pruned conv gets the channel mask on its affine weight and bias.

    Without it a zeroed conv channel still leaves BN's shift (a constant map), and cutting the
    channel out would change the network's output.
    """
    for seq in (m for m in model.modules() if isinstance(m, nn.Sequential)):
        children = list(seq.children())
        for a, b in zip(children, children[1:]):
            if a in pruned and isinstance(b, nn.modules.batchnorm._BatchNorm) and b.affine:
                mask = a.weight_mask.flatten(1)[:, 0].clone()
                prune.custom_from_mask(b, "weight", mask)
                prune.custom_from_mask(b, "bias", mask.clone())
                pruned.append(b)


def make_permanent(modules: Iterable[nn.Module]) -> None:
    """`prune.remove`: fold each mask into its tensor and drop the hooks and `*_orig` copies."""
    for m in modules:
        for name in ("weight", "bias"):
            if prune.is_pruned(m) and hasattr(m, f"{name}_mask"):
                prune.remove(m, name)


def shrink(model: nn.Module, sample: torch.Tensor) -> nn.Module | None:
    """A copy of an `nn.Sequential` net with its all-zero output channels/rows cut out (and the inputs
    downstream that read them), or None if there is nothing to cut or the net is not one this can follow.

    Exact: a removed channel outputs zero (its weight, bias and BN affine are zero), and zero stays
    zero through ReLU, pooling, dropout and flatten; the copy's outputs are checked against the
    original's on `sample` before it is returned.
    """
    if not isinstance(model, nn.Sequential):
        return None
    original = model
    model = copy.deepcopy(model)
    children = list(model.children())
    allowed = (nn.modules.conv._ConvNd, nn.Linear, nn.modules.batchnorm._BatchNorm, nn.ReLU, nn.ReLU6,
               nn.LeakyReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Dropout, nn.Identity, nn.MaxPool1d, nn.MaxPool2d,
               nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Flatten)
    if not all(isinstance(c, allowed) for c in children):  # every allowed activation maps 0 to 0
        return None
    # spatial size entering each Flatten, from one forward pass
    flat_in: dict[int, tuple[int, ...]] = {}
    hooks = [c.register_forward_hook(lambda mod, i, o, idx=idx: flat_in.__setitem__(idx, tuple(i[0].shape[1:])))
             for idx, c in enumerate(children) if isinstance(c, nn.Flatten)]
    with torch.no_grad():
        was = model.training
        model.eval()
        model(sample[:2])
        model.train(was)
    for h in hooks:
        h.remove()
    weighted = [i for i, c in enumerate(children) if isinstance(c, (nn.modules.conv._ConvNd, nn.Linear))]
    if not weighted:
        return None
    changed = False
    keep: torch.Tensor | None = None  # kept feature indices flowing out of the last weighted layer
    for idx, c in enumerate(children):
        if isinstance(c, (nn.modules.conv._ConvNd, nn.Linear)):
            with torch.no_grad():
                if keep is not None:  # inputs of this layer that the previous one removed
                    if isinstance(c, nn.Linear):
                        c.weight = nn.Parameter(c.weight[:, keep].clone())
                        c.in_features = len(keep)
                    else:
                        if c.groups != 1:
                            return None
                        c.weight = nn.Parameter(c.weight[:, keep].clone())
                        c.in_channels = len(keep)
                keep = None
                if idx == weighted[-1]:
                    break  # the classifier keeps every output
                rows = c.weight.flatten(1).abs().sum(1)
                if c.bias is not None:
                    rows = rows + c.bias.abs()
                alive = torch.nonzero(rows > 0).flatten()
                if len(alive) == 0:  # keep one channel; index tensors live where the weights do (cuda too)
                    alive = torch.zeros(1, dtype=torch.long, device=rows.device)
                if len(alive) < c.weight.shape[0]:
                    c.weight = nn.Parameter(c.weight[alive].clone())
                    if c.bias is not None:
                        c.bias = nn.Parameter(c.bias[alive].clone())
                    if isinstance(c, nn.Linear):
                        c.out_features = len(alive)
                    else:
                        c.out_channels = len(alive)
                    keep = alive
                    changed = True
        elif keep is not None and isinstance(c, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                if c.affine:
                    c.weight = nn.Parameter(c.weight[keep].clone())
                    c.bias = nn.Parameter(c.bias[keep].clone())
                if c.running_mean is not None:
                    c.running_mean = c.running_mean[keep].clone()
                    c.running_var = c.running_var[keep].clone()
                c.num_features = len(keep)
        elif keep is not None and isinstance(c, nn.Flatten):
            spatial = 1
            for d in flat_in.get(idx, (len(keep),))[1:]:
                spatial *= d
            keep = (keep[:, None] * spatial + torch.arange(spatial, device=keep.device)[None, :]).flatten()
    if not changed:
        return None
    with torch.no_grad(), torch.autocast(sample.device.type, enabled=False):  # compared in fp32, not a caller's bf16
        was = original.training
        original.eval()
        model.eval()
        ref, out = original(sample), model(sample)
        original.train(was)
        model.train(was)
    if not torch.allclose(ref, out, rtol=1e-4, atol=1e-4 * float(ref.abs().max().clamp(min=1))):
        return None  # something in the net does not keep a zero channel at zero: stay with the masked model
    return model


# ---------------------------------------------------------------- quantization


def _fuse_patterns(model: nn.Module) -> list[list[str]]:
    """conv-bn-relu, conv-bn, conv-relu and linear-relu runs inside every nn.Sequential."""
    out: list[list[str]] = []
    for prefix, seq in model.named_modules():
        if not isinstance(seq, nn.Sequential):
            continue
        names = [n for n, _ in seq.named_children()]
        mods = [m for _, m in seq.named_children()]
        i = 0
        while i < len(mods):
            full = [f"{prefix}.{n}" if prefix else n for n in names]
            if isinstance(mods[i], nn.Conv2d) and i + 1 < len(mods) and isinstance(mods[i + 1], nn.BatchNorm2d):
                if i + 2 < len(mods) and isinstance(mods[i + 2], nn.ReLU):
                    out.append(full[i: i + 3])
                    i += 3
                else:
                    out.append(full[i: i + 2])
                    i += 2
                continue
            if isinstance(mods[i], (nn.Conv2d, nn.Linear)) and i + 1 < len(mods) and isinstance(mods[i + 1], nn.ReLU):
                out.append(full[i: i + 2])
                i += 2
                continue
            i += 1
    return out


def _use_engine() -> str:
    """Select torch's quantized engine for this process (x86 when none is reported) and return it."""
    engine = quantized_engine() or "x86"
    torch.backends.quantized.engine = engine
    return engine


def _fused_and_wrapped(model: nn.Module, fuse: Callable[..., nn.Module], qconfig: Any) -> nn.Module:
    """Fuse conv-bn-relu runs with `fuse` (eval or QAT flavour), wrap in quant/dequant stubs, attach qconfig."""
    import torch.ao.quantization as tq

    patterns = _fuse_patterns(model)
    if patterns:
        model = fuse(model, patterns)
    wrapped = tq.QuantWrapper(model)
    wrapped.qconfig = qconfig
    return wrapped


def prepare_qat(model: nn.Module) -> nn.Module:
    """Fuse conv-bn-relu and insert fake quantization, so fine-tuning sees int8 rounding (x86 qconfig)."""
    import torch.ao.quantization as tq

    with _quiet():
        engine = _use_engine()
        model.train()
        wrapped = _fused_and_wrapped(model, tq.fuse_modules_qat, tq.get_default_qat_qconfig(engine))
        tq.prepare_qat(wrapped, inplace=True)
    return wrapped


def quantize_dynamic(model: nn.Module) -> nn.Module:
    import torch.ao.quantization as tq

    with _quiet():
        _use_engine()
        return tq.quantize_dynamic(model.cpu().eval(), {nn.Linear}, dtype=torch.qint8)


def quantize_static(model: nn.Module, calibration: Iterable[torch.Tensor]) -> nn.Module:
    """Post-training static int8: fuse, observe activations on calibration batches, convert (CPU)."""
    import torch.ao.quantization as tq

    with _quiet():
        engine = _use_engine()
        model = model.cpu().eval().to(memory_format=torch.contiguous_format)
        wrapped = _fused_and_wrapped(model, tq.fuse_modules, tq.get_default_qconfig(engine))
        tq.prepare(wrapped, inplace=True)
        with torch.inference_mode():
            for xb in calibration:
                wrapped(xb.cpu().contiguous())
        return tq.convert(wrapped, inplace=True)


def convert_qat(model: nn.Module) -> nn.Module:
    import torch.ao.quantization as tq

    with _quiet():
        _use_engine()
        return tq.convert(model.cpu().eval(), inplace=False)


# ---------------------------------------------------------------- measuring


Quantizer = Callable[[nn.Module, Callable[[], Iterable[torch.Tensor]], torch.device], nn.Module]


def _keep(model: nn.Module, calibration: Callable[[], Iterable[torch.Tensor]], dev: torch.device) -> nn.Module:
    return model


def _dynamic_int8(model: nn.Module, calibration: Callable[[], Iterable[torch.Tensor]], dev: torch.device) -> nn.Module:
    return quantize_dynamic(model)


def _static_int8(model: nn.Module, calibration: Callable[[], Iterable[torch.Tensor]], dev: torch.device) -> nn.Module:
    return quantize_static(model, calibration())


def _cast(mode: str) -> Quantizer:
    return lambda model, calibration, dev: model.to(dev, CAST_DTYPES[mode])


# The quantize registry: `quantize` mode -> (trained model, calibration batches, inference device) -> model.
QUANTIZERS: dict[str, Quantizer] = {
    "none": _keep, "dynamic_int8": _dynamic_int8, "static_int8": _static_int8, "bf16": _cast("bf16"),
    "fp16": _cast("fp16"),
}


def model_size_bytes(model: nn.Module) -> int:
    """Bytes of `torch.save(model.state_dict())`: what a deployed checkpoint weighs."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.getbuffer().nbytes


def _tensors(v: Any) -> Iterator[torch.Tensor]:
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from _tensors(x)


def params_nonzero(model: nn.Module) -> int:
    """Non-zero weights and biases (int8 ones counted by their integer values); BN statistics left out."""
    n = 0
    for key, v in model.state_dict().items():
        if key.endswith(("running_mean", "running_var", "num_batches_tracked", "scale", "zero_point")):
            continue
        for t in _tensors(v):
            if t.is_quantized:
                n += int(torch.count_nonzero(t.int_repr()))
            elif t.is_floating_point():
                n += int(torch.count_nonzero(t))
    # int8 Linear/conv keep weights in packed params, which state_dict exposes as (weight, bias) tuples above
    return n


def input_dtype(model: nn.Module) -> torch.dtype:
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32  # quantized models take fp32 and quantize at the input


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int,
             dev: torch.device) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of the compressed model on (x, y), on its inference device."""
    model.eval()
    dt = input_dtype(model)
    loss_sum, correct = 0.0, 0
    with torch.inference_mode():
        for i in range(0, len(y), batch_size):
            xb, yb = x[i: i + batch_size].to(dev, dt), y[i: i + batch_size].to(dev)
            logits = model(xb).float()
            loss_sum += float(nn.functional.cross_entropy(logits, yb, reduction="sum"))
            correct += int((logits.argmax(1) == yb).sum())
    n = max(1, len(y))
    return loss_sum / n, correct / n


def latency_ms(model: nn.Module, x: torch.Tensor, batch_size: int, dev: torch.device,
               warmup: int = LATENCY_WARMUP, repeats: int = LATENCY_REPEATS) -> float:
    """Median wall time of one forward pass on a batch of `batch_size`, after warm-up, synchronized."""
    reps = -(-batch_size // len(x))
    xb = x.repeat(reps, *([1] * (x.ndim - 1)))[:batch_size].to(dev, input_dtype(model)).contiguous()
    model.eval()
    times = []
    with torch.inference_mode():
        for _ in range(warmup):
            model(xb)
        for _ in range(repeats):
            t0 = accel.clock(dev)
            model(xb)
            times.append(accel.clock(dev) - t0)
    return statistics.median(times) * 1e3


# ---------------------------------------------------------------- the trainer's entry point


@dataclass
class Compressed:
    model: nn.Module
    val_accuracy: float
    val_loss: float
    finetune_time_s: float
    extra: dict[str, Any] = field(default_factory=dict)


Finetune = Callable[[nn.Module, int, bool], float]  # (model, epochs, qat) -> seconds spent (trainer.BuiltinFit)


def compress_and_measure(model: nn.Module, settings: dict[str, Any], train_dev: torch.device,
                         calibration: Callable[[], Iterable[torch.Tensor]], x_val: torch.Tensor,
                         y_val: torch.Tensor, val_accuracy: float, val_loss: float, finetune: Finetune,
                         epoch: int) -> Compressed:
    """Prune, fine-tune, quantize a copy of the trained model; measure it. The trained model is left as is."""
    s = settings
    t0 = time.perf_counter()
    m = copy.deepcopy(model).to(memory_format=torch.contiguous_format)
    finetune_time_s = 0.0
    pruned = prune_model(m, s["prune_method"], s["prune_amount"])
    shrunk = False
    if pruned:
        if s["finetune_epochs"] > 0:
            finetune_time_s = finetune(m, s["finetune_epochs"], False)
        make_permanent(pruned)
        if s["prune_method"] == "ln_structured":
            small = shrink(m, x_val[:64].to(next(m.parameters()).device))
            shrunk = small is not None
            m = small if small is not None else m
    dev = infer_device(s, train_dev)
    q = s["quantize"]
    if s["qat"]:  # QAT as fine-tuning of the trained model (the stable way): fake int8 forwards, then convert
        m = prepare_qat(m)
        finetune_time_s += finetune(m, max(1, s["finetune_epochs"]), True)
    try:
        m = convert_qat(m) if s["qat"] else QUANTIZERS[q](m, calibration, dev)
        m = m.to(dev) if q not in INT8_MODES and not s["qat"] else m
        changed = bool(pruned) or q != "none" or s["qat"]
        if changed:
            acc_loss = evaluate(m, x_val, y_val, s["eval_batch_size"], dev)
            val_loss, val_acc = acc_loss
        else:
            val_acc = val_accuracy  # nothing changed: the last epoch's accuracy stands
        lat = latency_ms(m, x_val, s["infer_batch_size"], dev)
    except (RuntimeError, NotImplementedError, AssertionError) as e:  # e.g. a user model torch.ao cannot convert
        if accel.is_oom(e):
            raise
        raise TrialStopped("unsupported", epoch, f"quantize {q}: {type(e).__name__}: "
                                                 f"{str(e).splitlines()[0] if str(e) else ''}"[:300]) from None
    extra = {
        "val_accuracy_before_compress": val_accuracy,
        "model_size_bytes": model_size_bytes(m),
        "params_nonzero": params_nonzero(m),
        "inference_latency_ms": lat,
        "finetune_time_s": finetune_time_s,
        "compress_time_s": time.perf_counter() - t0,
        "pruned_shrunk": shrunk,
    }
    return Compressed(model=m, val_accuracy=val_acc, val_loss=val_loss, finetune_time_s=finetune_time_s,
                      extra=extra)


def calibration_batches(batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                        n: int = CALIBRATION_BATCHES) -> Callable[[], Iterator[torch.Tensor]]:
    """The first `n` training batches' inputs, drawn when static quantization asks for them."""
    import itertools

    return lambda: (xb for xb, _ in itertools.islice(iter(batches), n))
