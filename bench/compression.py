"""Accuracy, size and CPU inference latency of the digits CNN: fp32 vs. each compression method.

One fp32 model is trained once; every method compresses a copy of it (pruning fine-tunes its copy
for `--finetune-epochs`), so the rows differ only by the compression. Latencies are medians over
interleaved rounds (each round times every model once per batch size), so a load change on a shared
machine hits all rows alike. Ratios are against fp32 measured in the same run.

    python bench/compression.py                      # defaults: 6 epochs, batches 1, 256, 1024
    python bench/compression.py --threads 1 --rounds 30
"""

from __future__ import annotations

import argparse
import copy
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import autotune  # noqa: E402
from autotune import compress, config
from autotune.compress import measure, prune, quantize, support  # noqa: E402
from autotune.fit.trainer import train_epoch  # noqa: E402
from autotune.spec.settings import DEFAULTS  # noqa: E402
from autotune.training.context.trial import TrialContext  # noqa: E402
from autotune.training.data import registry as data  # noqa: E402


def cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "?")
    flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
    simd = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")
            if f in flags]
    return f"{model} [{' '.join(simd) or 'no avx2'}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--finetune-epochs", type=int, default=1)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 256, 1024])
    ap.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds (median over them)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 keeps torch's default")
    ap.add_argument("--amounts", type=float, nargs="+", default=[0.25, 0.5, 0.75])
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    if args.threads:
        torch.set_num_threads(args.threads)
    cpu = torch.device("cpu")
    cfg = config.from_dict({
        "data": {"name": "digits"}, "model": {"name": "cnn", "channels": [32, 64], "hidden": 128},
        "train": {"device": "cpu", "epochs": args.epochs, "lr": 3e-3, "optimizer": "adam", "batch_size": 64},
    })
    t0 = time.perf_counter()
    base = autotune.train(cfg)
    assert base.model is not None
    fp32 = base.model.eval()
    print(f"trained fp32 digits CNN [32, 64] / 128 in {time.perf_counter() - t0:.1f}s; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, engine {quantize.quantized_engine()}, cpu {cpu_flags()}")
    ds = data.load(cfg.data)
    s = {**DEFAULTS, **cfg.fixed()}
    loss_fn = nn.CrossEntropyLoss()

    def finetune(m: nn.Module, epochs: int) -> None:
        """The trainer's own fine-tuning: its loop on a context at FINETUNE_LR_FACTOR x lr, constant."""
        ctx = TrialContext({**s, "lr": 3e-3 * compress.FINETUNE_LR_FACTOR, "epochs": epochs, "compile": False})
        prepared, _ = ctx.prepare(m, init=False)
        batches = ctx.loader((ds.x_train, ds.y_train))
        for _ in ctx.epochs():
            train_epoch(ctx, prepared, batches, ds.normalize, lambda out, yb, xb: loss_fn(out, yb))
            ctx.report()

    def pruned(method: str, amount: float) -> nn.Module:
        m = copy.deepcopy(fp32)
        layers = prune.prune_model(m, method, amount)
        finetune(m, args.finetune_epochs)
        prune.make_permanent(layers)
        if method == "ln_structured":
            small = prune.shrink(m, ds.x_val[:64])
            assert small is not None, "structured pruning did not shrink the CNN"
            m = small
        return m.eval()

    def calib() -> list[torch.Tensor]:
        return [ds.x_train[i: i + 64] for i in range(0, 64 * compress.pipeline.CALIBRATION_BATCHES, 64)]

    models: dict[str, nn.Module] = {"fp32": fp32}
    for a in args.amounts:
        models[f"l1_unstructured {a:g}"] = pruned("l1_unstructured", a)
    for a in args.amounts:
        models[f"ln_structured {a:g}"] = pruned("ln_structured", a)
    models["dynamic_int8"] = quantize.quantize_dynamic(copy.deepcopy(fp32))
    models["static_int8"] = quantize.quantize_static(copy.deepcopy(fp32), calib())
    for mode in ("bf16", "fp16"):
        if support.cast_error("cpu", mode) is None:
            models[mode] = copy.deepcopy(fp32).to(quantize.CAST_DTYPES[mode]).eval()
    models["ln_structured 0.5 + static_int8"] = quantize.quantize_static(pruned("ln_structured", 0.5), calib())
    qat = quantize.prepare_qat(copy.deepcopy(fp32))
    finetune(qat, max(1, args.finetune_epochs))
    models["static_int8 (qat fine-tune)"] = quantize.convert_qat(qat)

    acc = {k: measure.val_metrics(m, ds, ds.x_val, ds.y_val, 512, cpu)["val_accuracy"] for k, m in models.items()}
    size = {k: measure.model_size_bytes(m) for k, m in models.items()}
    nz = {k: measure.params_nonzero(m) for k, m in models.items()}
    times: dict[tuple[str, int], list[float]] = {(k, b): [] for k in models for b in args.batches}
    for m in models.values():  # warm-up every model at every batch size
        for b in args.batches:
            measure.latency_ms(m, ds.x_val, b, cpu, warmup=3, repeats=1)
    for _ in range(args.rounds):
        for b in args.batches:
            for k, m in models.items():
                times[(k, b)].append(measure.latency_ms(m, ds.x_val, b, cpu, warmup=0, repeats=3))
    lat = {key: statistics.median(v) for key, v in times.items()}

    head = f"{'method':<32} {'val_acc':>8} {'d_acc':>7} {'size':>9} {'x fp32':>7} {'nonzero':>8}"
    for b in args.batches:
        head += f" {'ms@' + str(b):>9} {'x fp32':>7}"
    print("\n" + head)
    for k in models:
        row = f"{k:<32} {acc[k]:>8.4f} {acc[k] - acc['fp32']:>+7.4f} {size[k] / 1024:>8.1f}K " \
              f"{size[k] / size['fp32']:>7.3f} {nz[k]:>8d}"
        for b in args.batches:
            row += f" {lat[(k, b)]:>9.3f} {lat[(k, b)] / lat[('fp32', b)]:>7.3f}"
        print(row)
    print("\nx fp32: ratio to the fp32 row (size, latency: lower is better); latency = median over "
          f"{args.rounds} interleaved rounds of 3 timed forwards each, after warm-up")


if __name__ == "__main__":
    main()
