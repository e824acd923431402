"""Quantization of a trained model: int8 (dynamic, static, from QAT) on CPU, or a bf16 / fp16 cast.

- `dynamic_int8`: Linear weights int8, activations quantized on the fly;
- `static_int8`: conv and linear int8 with activations calibrated on training batches, eager-mode torch.ao
  on the x86/fbgemm engine, conv+bn+relu fused first;
- QAT (`qat: true`): `prepare_qat` before fine-tuning (fake quantization), `convert_qat` after;
- `bf16` / `fp16`: the whole model cast.
`QUANTIZERS` maps each `quantize` setting to the step that produces the deployed model.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

INT8_MODES = ("dynamic_int8", "static_int8")
CAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

Calibration = Callable[[], Iterable[torch.Tensor]]  # training batches' inputs, drawn when static int8 asks
Quantizer = Callable[[nn.Module, Calibration, torch.device], nn.Module]  # (model, calibration, infer device)


def quantized_engine() -> str | None:
    """The CPU int8 engine to use: x86 (fbgemm + onednn) where built, else fbgemm, else qnnpack (ARM)."""
    engines = torch.backends.quantized.supported_engines
    for name in ("x86", "fbgemm", "qnnpack"):
        if name in engines:
            return name
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch.ao's eager quantization warns that it is deprecated (it still ships and works): noted in
    docs/howto/compression.md."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization.*deprecated.*")
        warnings.filterwarnings("ignore", message=r".*quant_min and quant_max.*")
        warnings.filterwarnings("ignore", message=r".*reduce_range.*")
        warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions.*")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.ao.*")
        yield


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


QUANTIZERS: dict[str, Quantizer] = {  # the `quantize` setting's values; int8 models stay on the CPU
    "none": lambda m, calibration, dev: m.to(dev),
    "dynamic_int8": lambda m, calibration, dev: quantize_dynamic(m),
    "static_int8": lambda m, calibration, dev: quantize_static(m, calibration()),
    "bf16": lambda m, calibration, dev: m.to(dev, CAST_DTYPES["bf16"]),
    "fp16": lambda m, calibration, dev: m.to(dev, CAST_DTYPES["fp16"]),
}


def quantize_model(model: nn.Module, mode: str, qat: bool, calibration: Calibration, dev: torch.device) -> nn.Module:
    """The deployed model: a QAT-prepared model converted to int8, or `mode`'s quantizer applied."""
    if qat:
        return convert_qat(model)
    return QUANTIZERS[mode](model, calibration, dev)
