"""The GPU check: what autotune's trainer does on a fast GPU, measured where it runs (`bench/gpu_check.sh` runs it).

Sections, each printed as it finishes and written to OUT/gpu_check.json after every row (a run cut short keeps
what it measured):
1. ceilings: square matmuls in fp32 with TF32 off, TF32, bf16 and fp16 (TFLOP/s), to read the rows against;
2. rows, through `autotune.train` on synthetic 3x32x32 images at batch 512: autotune's `resnet` (depth 14, width 64),
   then the small CNN. fp32 with TF32 off (matmul and cuDNN) is each model's baseline; TF32, bf16, fp16 and
   bf16 + channels_last are compared with it; the resnet also runs bf16 + channels_last + compile twice: cold (the
   first compile in this process, inductor's cache directory empty when gpu_check.sh made it) and warm (the same
   configuration again). Per row: steady samples/s (epochs 2..), its ratio to the baseline, achieved TFLOP/s
   (FLOPs counted by torch's FLOP counter) and its share of the matching matmul ceiling, compile s, train s,
   val accuracy, peak CUDA memory, and the CUDA memory still allocated after the row against before the first;
   the trial's own meters too: `peak_memory_mb` (the allocator's peak over its training) and `energy_j` (NVML's
   energy counter, or its power integrated; "-" where absent) and what measured them;
3. several devices per trial (`devices`): the resnet in bf16 + channels_last on one GPU in this process (the
   baseline), then through autotune's launcher on min(2, GPUs visible) GPUs: DistributedDataParallel over NCCL,
   the global batch split over the ranks. With 2+ GPUs it is the speed-up of a second GPU; with one GPU it is a
   world of one rank (the same launcher, NCCL and DDP on one GPU): what the launcher and DDP cost, not a speed-up;
4. autotune as a guest (bench/gpu_guest.py, about 30 s): a hang inside a CUDA synchronize under hang_seconds, the
   step hooks on fused and foreach CUDA optimizers, the Hugging Face and Lightning examples in bf16;
5. a 6-trial study (bench/gpu_check.yaml): grid over precision x channels_last x compile on the small CNN, each
   trial's figures and the CUDA memory it left behind, then the study's HTML report.

    python3 bench/gpu_check.py [--device cuda|cpu] [--out studies] [--budget-s 270]

`--device cpu` runs the same path on small sizes: a test of the script, not a benchmark.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # autotune from this checkout

import autotune  # noqa: E402
from autotune import config  # noqa: E402
from autotune.fit import TrialPlan, trainer  # noqa: E402
from autotune.spec import TrialRecord  # noqa: E402
from autotune.spec.settings import DEFAULTS  # noqa: E402
from autotune.study import runner as study_mod  # noqa: E402
from autotune.training import (
    accel,  # noqa: E402
    models,  # noqa: E402
)
from autotune.training.distributed.devices import cpu_cores  # noqa: E402


@dataclass(frozen=True)
class Sizes:
    n_samples: int  # synthetic images; 80% train
    batch: int
    epochs: int
    resnet: dict[str, Any]
    cnn: dict[str, Any]
    matmul_n: int
    study: dict[str, Any] = field(default_factory=dict)  # overrides of bench/gpu_check.yaml


# Image counts whose 80% training split is a whole number of batches: a smaller last batch would make compiled
# rows recompile inside their first epoch.
SIZES = {
    "cuda": Sizes(n_samples=25_600, batch=512, epochs=4, resnet={"depth": 14, "width": 64},
                  cnn={"channels": [64, 128, 256], "hidden": 256}, matmul_n=8192),
    "cpu": Sizes(n_samples=640, batch=128, epochs=2, resnet={"depth": 8, "width": 4},
                 cnn={"channels": [4, 8], "hidden": 16}, matmul_n=512,
                 study={"data.n_samples": 640, "model.channels": [4, 8], "model.hidden": 16,
                        "train.batch_size": 128, "train.epochs": 2}),
}

# name, train params. matmul_precision sets TF32 for matmuls and (autotune's backend_flags) cuDNN convolutions:
# "highest" is true fp32, "high" TF32.
FP32 = {"matmul_precision": "highest"}
ROWS: list[tuple[str, dict[str, Any]]] = [
    ("fp32, TF32 off (baseline)", {"precision": "fp32", **FP32}),
    ("fp32, TF32 on", {"precision": "fp32", "matmul_precision": "high"}),
    ("bf16", {"precision": "bf16", **FP32}),
    ("fp16 (+ GradScaler)", {"precision": "fp16", **FP32}),
    ("bf16 + channels_last", {"precision": "bf16", "channels_last": True, **FP32}),
]
# The same compiled configuration twice: cold (nothing compiled yet in this process, inductor's cache directory
# empty) and warm (compiled afresh after autotune's compiler reset between trials, inductor's cache now filled).
COMPILED = {"precision": "bf16", "channels_last": True, "compile": True, **FP32}
COMPILE_ROWS: list[tuple[str, dict[str, Any]]] = [
    ("bf16 + channels_last + compile, cold", COMPILED),
    ("bf16 + channels_last + compile, warm", COMPILED),
]
CEILING_OF = {"fp32": "fp32, TF32 off", "tf32": "TF32", "bf16": "bf16", "fp16": "fp16"}


class Check:
    """Prints each figure as it is measured and keeps them all for OUT/gpu_check.json."""

    def __init__(self, dev: torch.device, out: Path, budget_s: float | None) -> None:
        self.dev = dev
        self.cuda = dev.type == "cuda"
        self.out = out
        self.t0 = time.perf_counter()
        self.budget_s = budget_s
        self.fatal: str | None = None
        self.figures: dict[str, Any] = {"ceilings_tflops": {}, "rows": [], "ddp": [], "study": [], "notes": []}

    def say(self, line: str = "") -> None:
        print(line, flush=True)

    def note(self, line: str) -> None:
        self.figures["notes"].append(line)
        self.say(f"note: {line}")

    def save(self) -> None:
        self.figures["elapsed_s"] = round(time.perf_counter() - self.t0, 1)
        (self.out / "gpu_check.json").write_text(json.dumps(self.figures, indent=1))

    def may_run(self, what: str) -> bool:
        if self.fatal is not None:
            self.say(f"skipped {what}: the CUDA context is broken ({self.fatal})")
            return False
        if self.budget_s is not None and time.perf_counter() - self.t0 > self.budget_s:
            self.note(f"skipped {what}: past the check's {self.budget_s:g} s budget")
            return False
        return True

    def memory_mib(self) -> float:
        return torch.cuda.memory_allocated(self.dev) / 2**20 if self.cuda else float("nan")



def _failed(chk: Check, row: dict[str, Any], e: Exception) -> None:
    """One failing row must not end an unattended check: its error in one line; a broken CUDA context ends it."""
    row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
    if accel.is_fatal_device_error(e):
        chk.fatal = row["error"]

def environment(dev: torch.device) -> dict[str, str]:
    env = {"device": accel.device_name(dev), "torch": torch.__version__, "python": platform.python_version(),
           "autotune": autotune.__version__, "cuda": str(torch.version.cuda),
           "cudnn": str(torch.backends.cudnn.version())}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = "none"
    if dev.type == "cuda":
        cap = torch.cuda.get_device_capability(dev)
        env["capability"] = f"{cap[0]}.{cap[1]}"
        env["memory_gib"] = f"{torch.cuda.get_device_properties(dev).total_memory / 2**30:.0f}"
    return env


# ---------------------------------------------------------------- 1. ceilings


def matmul_tflops(dev: torch.device, dtype: torch.dtype, n: int, tf32: bool, reps: int = 10) -> float:
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
    for _ in range(3):
        a @ b
    t0 = accel.clock(dev)
    for _ in range(reps):
        a @ b
    seconds = accel.clock(dev) - t0
    torch.set_float32_matmul_precision("highest")
    return 2 * n**3 * reps / seconds / 1e12


def ceilings(chk: Check, n: int) -> None:
    chk.say(f"== ceilings: {n}x{n}x{n} matmul, mean of 10 after 3 warm-ups")
    for key, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                             ("bf16", torch.bfloat16, False), ("fp16", torch.float16, False)):
        try:
            v = matmul_tflops(chk.dev, dtype, n, tf32)
        except Exception as e:  # e.g. a dtype this device has no matmul for
            chk.note(f"matmul {key}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        chk.figures["ceilings_tflops"][key] = float(f"{v:.4g}")
        chk.say(f"  {CEILING_OF[key]:<16} {v:9.3g} TFLOP/s")
    chk.save()


# ---------------------------------------------------------------- 2. rows


def model_cfg(kind: str, sizes: Sizes) -> dict[str, Any]:
    if kind == "resnet":  # autotune's CIFAR-style resnet: stages of width, 2 x width, 4 x width channels
        return {"name": "resnet", **sizes.resnet}
    return {"name": "cnn", **sizes.cnn}


def run_cfg(device: str, kind: str, sizes: Sizes) -> config.RunConfig:
    return config.from_dict({
        "study": {"seed": 0},
        "data": {"name": "synthetic", "shape": [3, 32, 32], "n_samples": sizes.n_samples, "n_classes": 10},
        "model": model_cfg(kind, sizes),
        "train": {"device": device, "epochs": sizes.epochs, "batch_size": sizes.batch, "lr": 2e-3,
                  "optimizer": "adamw", "cudnn_benchmark": True},
    }, source=str(ROOT / "bench" / "gpu_check.py"))


def flops_per_sample(cfg: config.RunConfig) -> float:
    """Forward + backward FLOPs of one training sample: torch's FLOP counter on the meta device (shapes only)."""
    shape = tuple(cfg.data.shape)
    with torch.device("meta"):
        model = models.build(cfg.model, shape, cfg.data.n_classes, 0.0, "default", "gpu_check.py")
        x, y = torch.empty(4, *shape), torch.zeros(4, dtype=torch.long)
        with FlopCounterMode(display=False) as counter:
            nn.functional.cross_entropy(model(x), y).backward()
    return counter.get_total_flops() / 4


def one_row(chk: Check, kind: str, cfg: config.RunConfig, name: str, params: dict[str, Any], flops: float,
            baseline_mem: float) -> dict[str, Any]:
    row: dict[str, Any] = {"model": kind, "row": name, "params": params}
    if chk.cuda:
        torch.cuda.reset_peak_memory_stats(chk.dev)
    t0 = time.perf_counter()
    try:
        r = autotune.train(cfg, params=params, seed=0)
        row.update(samples_per_s=round(r.samples_per_s, 1), compile_time_s=round(r.compile_time_s, 2),
                   train_time_s=round(r.train_time_s, 3), val_accuracy=round(r.val_accuracy, 4),
                   epochs=r.epochs_run, tflops=float(f"{r.samples_per_s * flops / 1e12:.4g}"),
                   peak_memory_mb=_round(r.peak_memory_mb, 1), energy_j=_round(r.energy_j, 1), meters=r.meters)
        del r  # the result holds the trained model (on the GPU): drop it before reading what is left
    except Exception as e:  # one failing row must not end an unattended check
        _failed(chk, row, e)
    finally:
        accel.release_memory()
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    if chk.cuda and chk.fatal is None:
        row["peak_mib"] = round(torch.cuda.max_memory_allocated(chk.dev) / 2**20)
        row["left_mib"] = round(chk.memory_mib() - baseline_mem, 1)
    return row


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def _num(v: Any, width: int, spec: str) -> str:
    """`v` right-aligned in `width` by `spec` ('-' when absent: a meter with nothing to read)."""
    return format(v, f">{width}{spec}") if isinstance(v, (int, float)) else format("-", f">{width}")


def rows(chk: Check, device: str, kind: str, sizes: Sizes, compile_rows: bool) -> None:
    cfg = run_cfg(device, kind, sizes)
    flops = flops_per_sample(cfg)
    chk.say(f"== {kind}: {flops / 1e9:.3f} GFLOP per sample (forward + backward); {sizes.n_samples} synthetic "
            f"3x32x32 images (80% train), batch {sizes.batch}, {sizes.epochs} epochs, AdamW; samples/s over "
            f"epochs 2..{sizes.epochs}")
    chk.say(f"  {'row':<38} {'samples/s':>10} {'vs fp32':>8} {'TFLOP/s':>8} {'of ceil':>7} {'compile s':>9} "
            f"{'train s':>8} {'val acc':>7} {'peak MiB':>8} {'left MiB':>8} {'wall s':>6} {'peak_memory_mb':>14} "
            f"{'energy_j':>9}")
    autotune.train(cfg, params={"epochs": 1})  # warm the dataset cache, cuDNN and the allocator before any row
    accel.release_memory()
    baseline_mem = chk.memory_mib()
    base: float | None = None
    for name, params in ROWS + (COMPILE_ROWS if compile_rows else []):
        if not chk.may_run(f"{kind} / {name}"):
            continue
        row = one_row(chk, kind, cfg, name, params, flops, baseline_mem)
        chk.figures["rows"].append(row)
        chk.save()
        if "error" in row:
            chk.say(f"  {name:<38} FAILED {row['error']}")
            continue
        if base is None and name.startswith("fp32, TF32 off"):
            base = row["samples_per_s"]
        ratio = row["samples_per_s"] / base if base else float("nan")
        row["vs_baseline"] = round(ratio, 2)
        key = "tf32" if params.get("matmul_precision") == "high" else params.get("precision", "fp32")
        ceil = chk.figures["ceilings_tflops"].get(key)
        share = f"{row['tflops'] / ceil:6.0%}" if ceil else "     -"
        mem = (f"{row['peak_mib']:>8} {row['left_mib']:>8}" if "peak_mib" in row else f"{'-':>8} {'-':>8}")
        chk.say(f"  {name:<38} {row['samples_per_s']:>10,.0f} {ratio:>7.2f}x {row['tflops']:>8.3g} {share:>7} "
                f"{row['compile_time_s']:>9.2f} {row['train_time_s']:>8.2f} {row['val_accuracy']:>7.3f} {mem} "
                f"{row['wall_s']:>6.1f} {_num(row['peak_memory_mb'], 14, ',.0f')} {_num(row['energy_j'], 9, ',.1f')}")
        if name.startswith("fp32, TF32 off"):  # once per model: what measured the meters (or why one is absent)
            chk.say(f"  (meters: {row['meters']})")
        chk.save()


# ---------------------------------------------------------------- 3. several devices per trial

DDP_PARAMS = {"precision": "bf16", "channels_last": True, **FP32}


def ddp(chk: Check, device: str, sizes: Sizes) -> None:
    visible = torch.cuda.device_count() if chk.cuda else cpu_cores()
    n = min(2, visible)
    cfg = run_cfg(device, "resnet", sizes)
    what = (f"{n} GPUs, NCCL" if n > 1 else "1 GPU as a world of one rank: the launcher's and DDP's own cost, "
            "not a speed-up") if chk.cuda else f"{n} CPU processes, gloo (a test of the path, not a benchmark)"
    chk.say(f"== several devices per trial: resnet {sizes.resnet} bf16 + channels_last, global batch {sizes.batch}, "
            f"{sizes.epochs} epochs; {visible} {'GPU(s)' if chk.cuda else 'CPU cores'} visible -> devices {n} "
            f"({what})")
    chk.say(f"  {'row':<38} {'samples/s':>10} {'vs 1':>6} {'train s':>8} {'val acc':>7} {'wall s':>6}")
    base: float | None = None
    for name, devices, launch in (("1 device, in this process", 1, False),
                                  (f"devices {n} through the launcher", n, True)):
        if not chk.may_run(f"ddp / {name}"):
            return
        row: dict[str, Any] = {"row": name, "devices": devices, "launcher": launch}
        t0 = time.perf_counter()
        try:
            values = {**DEFAULTS, **cfg.fixed(), **DDP_PARAMS, "devices": devices}
            plan = TrialPlan.of(cfg, values, 0, measure_inference=False, study_rules=False).training
            r = trainer.train(plan, keep_model=False, launch=launch)  # metrics only: rank 0 sends no model back
            row.update(samples_per_s=round(r.samples_per_s, 1), train_time_s=round(r.train_time_s, 3),
                       val_accuracy=round(r.val_accuracy, 4), device=r.device)
        except Exception as e:  # one failing row must not end an unattended check
            _failed(chk, row, e)
        finally:
            accel.release_memory()
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        chk.figures["ddp"].append(row)
        chk.save()
        if "error" in row:
            chk.say(f"  {name:<38} FAILED {row['error']}")
            continue
        if not launch:
            base = row["samples_per_s"]
        row["vs_one"] = round(row["samples_per_s"] / base, 2) if base else float("nan")
        chk.say(f"  {name:<38} {row['samples_per_s']:>10,.0f} {row['vs_one']:>5.2f}x {row['train_time_s']:>8.2f} "
                f"{row['val_accuracy']:>7.3f} {row['wall_s']:>6.1f}")
        chk.save()


# ---------------------------------------------------------------- 5. the study


def study(chk: Check, device: str, sizes: Sizes) -> None:
    over = {"train.device": device, "study.storage": f"sqlite:///{chk.out.resolve()}/gpu-check.db", **sizes.study}
    cfg = autotune.load_config(str(ROOT / "bench" / "gpu_check.yaml"), overrides=over)
    chk.say(f"== study {cfg.study.name}: {cfg.study.n_trials} trials, {cfg.study.sampler} over "
            f"{' x '.join(cfg.space)}; cnn {list(cfg.model.channels)}/{cfg.model.hidden}, "
            f"{cfg.data.n_samples} images, batch {cfg.train['batch_size']}, {cfg.train['epochs']} epochs")
    chk.say(f"  {'trial':>5} {'precision':<9} {'ch_last':<7} {'compile':<7} {'state':<8} {'samples/s':>10} "
            f"{'compile s':>9} {'train s':>8} {'val acc':>7} {'left MiB':>8} {'peak MB':>8} {'energy J':>9}  stop")
    accel.release_memory()
    baseline_mem = chk.memory_mib()

    def on_trial(s: Any, t: Any) -> None:
        record, p = TrialRecord.of(t), t.params
        rec = {"number": t.number, "params": p, "state": t.state.name,
               **{k: record.metrics.get(k) for k in ("samples_per_s", "compile_time_s", "train_time_s", "val_accuracy",
                                                     "peak_memory_mb", "energy_j")},
               "meters": record.meters, "stop_reason": record.stop_reason, "stop_detail": record.stop_detail,
               "error": record.error}
        if chk.cuda:
            rec["left_mib"] = round(chk.memory_mib() - baseline_mem, 1)
        chk.figures["study"].append(rec)
        chk.save()

        def num(k: str, fmt: str) -> str:
            v = rec.get(k)
            return format(v, fmt) if isinstance(v, (int, float)) else "-"

        stop = rec.get("stop_reason") or ""
        if rec.get("stop_detail") or rec.get("error"):
            stop += f" ({rec.get('stop_detail') or rec.get('error')})"
        chk.say(f"  {t.number:>5} {p.get('precision', '-'):<9} {str(p.get('channels_last', '-')):<7} "
                f"{str(p.get('compile', '-')):<7} {t.state.name:<8} {num('samples_per_s', '>10,.0f')} "
                f"{num('compile_time_s', '>9.2f')} {num('train_time_s', '>8.2f')} {num('val_accuracy', '>7.3f')} "
                f"{num('left_mib', '>8.1f') if chk.cuda else '-':>8} {_num(rec['peak_memory_mb'], 8, ',.0f')} "
                f"{_num(rec['energy_j'], 9, ',.1f')}  {stop[:160]}")

    res = autotune.TuneResult(study=study_mod.run(cfg, fresh=True, callbacks=[on_trial]), config=cfg)
    best = res.best
    if best is not None:
        chk.say(f"  recommended: trial {best.number} {best.params}")
        chk.figures["study_best"] = {"number": best.number, "params": best.params}
    try:
        path = res.report(chk.out / "gpu-check.html")
        chk.say(f"  report: {path}")
    except Exception as e:  # the figures above stand without the HTML
        chk.note(f"report: {type(e).__name__}: {e}")
    chk.save()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", default="studies")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="skip what is left after this many seconds (default: 270 on cuda, none on cpu)")
    args = ap.parse_args()
    budget = args.budget_s if args.budget_s is not None else (270.0 if args.device == "cuda" else None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = accel.resolve_device(args.device)
    sizes = SIZES[args.device]
    chk = Check(dev, out, budget)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the study's trials are printed as table rows
    torch.manual_seed(0)
    env = environment(dev)
    chk.figures["environment"] = env
    chk.say("== environment: " + "; ".join(f"{k} {v}" for k, v in env.items()))
    ceilings(chk, sizes.matmul_n)
    if chk.may_run("resnet rows"):
        rows(chk, args.device, "resnet", sizes, compile_rows=True)
    if chk.may_run("cnn rows"):
        rows(chk, args.device, "cnn", sizes, compile_rows=False)
    if chk.may_run("several devices per trial"):
        ddp(chk, args.device, sizes)
    if chk.may_run("the guest sections"):
        from bench import gpu_guest

        gpu_guest.guest(chk, args.device)
    if chk.may_run("the study"):
        study(chk, args.device, sizes)
    chk.save()
    chk.say(f"== done in {time.perf_counter() - chk.t0:.0f} s; figures in {out / 'gpu_check.json'}")


if __name__ == "__main__":
    main()
