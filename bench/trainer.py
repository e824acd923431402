"""How fast is autotune's trainer? A plain PyTorch loop vs. `autotune.train`, on the digits CNN.

(a) the loop the official PyTorch MNIST example writes: TensorDataset + DataLoader(shuffle=True),
    `loss.item()` every step; (b) `autotune.train` with the best settings for this device. Both:
10 epochs, batch 64, Adam 1e-3, the same model; each figure the median of --repeats runs.
Also: each acceleration setting's effect, measured here, and (b)'s achieved GFLOP/s against a
large matmul's on the same device. Every figure is a ratio against a baseline measured in this run.

    python bench/trainer.py [--device cpu|cuda] [--repeats 3] [--synthetic]

`--images`: the 32x32x3 workload instead. Synthetic images written as a CIFAR-10 python folder, a resnet,
crop (pad 4) + flip augmentation: (a) the loop torchvision's CIFAR tutorial writes (a Dataset applying
RandomCrop / RandomHorizontalFlip / ToTensor / Normalize per image on the CPU, DataLoader with 2 workers,
`loss.item()` per step) against (b) `autotune.train` on `data: {name: cifar10}` (uint8 on the device,
normalized and augmented per batch there). Same model, epochs, batch, optimizer; medians of interleaved runs.

    python bench/trainer.py --images [--repeats 3] [--image-epochs 3] [--n-images 2560]
"""

from __future__ import annotations

import argparse
import pickle
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torch.utils.flop_counter import FlopCounterMode

import autotune
from autotune import config
from autotune.training import accel, models
from autotune.training.data import registry as data

EPOCHS, BATCH, LR = 10, 64, 1e-3


def make_cfg(device: str, synthetic: bool) -> config.RunConfig:
    d = {"name": "synthetic", "shape": [3, 32, 32], "n_samples": 20000, "n_classes": 10} if synthetic \
        else {"name": "digits"}
    return config.from_dict({
        "study": {"seed": 0}, "data": d, "model": {"name": "cnn", "channels": [32, 64], "hidden": 128},
        "train": {"device": device, "epochs": EPOCHS, "batch_size": BATCH, "lr": LR, "optimizer": "adam"},
    })


def plain_loop(cfg: config.RunConfig, seed: int) -> tuple[float, float]:
    """The PyTorch-example way. Returns (train samples/s over epochs 2.., final val accuracy)."""
    dev = accel.resolve_device(cfg.train["device"])
    torch.manual_seed(seed)
    ds = data.load(cfg.data)
    model = models.build(cfg.model, ds.input_shape, ds.n_classes, 0.0, "default").to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loader = DataLoader(TensorDataset(ds.x_train, ds.y_train), batch_size=BATCH, shuffle=True)
    times = []
    for _ in range(EPOCHS):
        model.train()
        accel.synchronize(dev)
        t0 = time.perf_counter()
        for x, y in loader:
            x, y = x.to(dev), y.to(dev)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            loss.item()  # the example logs every step: a host sync each time
        accel.synchronize(dev)
        times.append(time.perf_counter() - t0)
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(ds.x_val[i:i + 1000].to(dev)).argmax(1) == ds.y_val[i:i + 1000].to(dev)).sum())
                      for i in range(0, len(ds.y_val), 1000))
    steady = times[1:]
    return len(ds.y_train) * len(steady) / sum(steady), correct / len(ds.y_val)


def autotune_run(cfg: config.RunConfig, seed: int, **settings: Any) -> tuple[float, float, float]:
    r = autotune.train(cfg, params=settings, seed=seed)
    return r.samples_per_s, r.val_accuracy, r.compile_time_s


def matmul_gflops(dev: torch.device, n: int = 2048, reps: int = 10) -> float:
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    a @ b
    accel.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    accel.synchronize(dev)
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e9


def flops_per_sample(cfg: config.RunConfig) -> float:
    """Forward + backward FLOPs of one training sample, counted by torch's FLOP counter."""
    ds = data.load(cfg.data)
    model = models.build(cfg.model, ds.input_shape, ds.n_classes, 0.0, "default")
    x, y = ds.x_train[:BATCH], ds.y_train[:BATCH]
    with FlopCounterMode(display=False) as counter:
        nn.functional.cross_entropy(model(x), y).backward()
    return counter.get_total_flops() / BATCH


# ---------------------------------------------------------------- the 32x32x3 workload (--images)

IMG_BATCH, IMG_LR = 128, 2e-3
IMG_MODEL = {"name": "resnet", "depth": 8, "width": 16}


def write_cifar_folder(root: Path, n: int, seed: int = 0) -> Path:
    """Synthetic 32x32x3 images in CIFAR-10's python format (five training batches): each class a colour
    and a stripe orientation, plus noise, so augmentation and accuracy mean something."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per = n // 5
    yy, xx = np.mgrid[0:32, 0:32]
    for b in range(1, 6):
        labels = rng.integers(0, 10, per)
        colour = (np.stack([labels * 25, 255 - labels * 25, (labels * 77) % 255], 1))[:, :, None, None]
        stripes = np.sin((xx[None] * np.cos(labels[:, None, None] * 0.31) + yy[None] *
                          np.sin(labels[:, None, None] * 0.31)) * 0.8)[:, None] * 60
        img = np.clip(0.5 * colour + 64 + stripes + rng.normal(0, 40, (per, 3, 32, 32)), 0, 255).astype(np.uint8)
        with open(folder / f"data_batch_{b}", "wb") as f:
            pickle.dump({b"data": img.reshape(per, -1), b"labels": labels.tolist()}, f)
    return folder


class TutorialCifar(Dataset):
    """What `torchvision.datasets.CIFAR10(transform=Compose([RandomCrop(32, padding=4), RandomHorizontalFlip(),
    ToTensor(), Normalize(mean, std)]))` does per image, on the CPU (torchvision itself does not import beside
    this machine's CPU torch; these are the same operations)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, train: bool) -> None:
        self.x, self.y, self.mean, self.std, self.train = x, y, mean.view(3, 1, 1), std.view(3, 1, 1), train

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = self.x[i]
        if self.train:
            padded = nn.functional.pad(img, (4, 4, 4, 4))  # RandomCrop(32, padding=4): zero padding
            top, left = np.random.randint(0, 9, 2)
            img = padded[:, top: top + 32, left: left + 32]
            if np.random.rand() < 0.5:  # RandomHorizontalFlip
                img = img.flip(2)
        return (img.float() / 255 - self.mean) / self.std, self.y[i]  # ToTensor, Normalize


def tutorial_loop(cfg: config.RunConfig, seed: int, epochs: int) -> tuple[float, float, float]:
    """(a): the tutorial's loop. Returns (samples/s over epochs 2.., val accuracy, share of time waiting for data)."""
    dev = accel.resolve_device(cfg.train["device"])
    torch.manual_seed(seed)
    np.random.seed(seed)
    ds = data.load(cfg.data, cfg.source)
    assert ds.mean is not None and ds.std is not None
    model = models.build(cfg.model, ds.input_shape, ds.n_classes, 0.0, "default").to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=IMG_LR)
    loader = DataLoader(TutorialCifar(ds.x_train, ds.y_train, ds.mean.flatten(), ds.std.flatten(), True),
                        batch_size=IMG_BATCH, shuffle=True, num_workers=2, persistent_workers=True)
    times, waits = [], []
    for _ in range(epochs):
        model.train()
        accel.synchronize(dev)
        t0 = time.perf_counter()
        wait = 0.0
        tw = time.perf_counter()
        for x, y in loader:
            wait += time.perf_counter() - tw
            x, y = x.to(dev), y.to(dev)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            loss.item()
            tw = time.perf_counter()
        accel.synchronize(dev)
        times.append(time.perf_counter() - t0)
        waits.append(wait)
    model.eval()
    val = DataLoader(TutorialCifar(ds.x_val, ds.y_val, ds.mean.flatten(), ds.std.flatten(), False), batch_size=500)
    with torch.no_grad():
        correct = sum(int((model(x.to(dev)).argmax(1) == y.to(dev)).sum()) for x, y in val)
    return len(ds.y_train) * (epochs - 1) / sum(times[1:]), correct / len(ds.y_val), sum(waits) / sum(times)


def images_main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="autotune-bench-"))
    folder = write_cifar_folder(tmp, args.n_images)
    cfg = config.from_dict({
        "study": {"seed": 0}, "data": {"name": "cifar10", "path": str(folder)}, "model": IMG_MODEL,
        "train": {"device": args.device, "epochs": args.image_epochs, "batch_size": IMG_BATCH, "lr": IMG_LR,
                  "optimizer": "adam"},
    })
    dev = accel.resolve_device(cfg.train["device"])
    aug = {"aug_crop_padding": 4, "aug_flip": True}
    print(f"device: {accel.device_name(dev)}; torch {torch.__version__}; {args.n_images} synthetic 3x32x32 images "
          f"(80% train) in CIFAR-10 format; resnet depth 8 width 16; {args.image_epochs} epochs, batch {IMG_BATCH}, "
          f"Adam {IMG_LR:g}; median of {args.repeats} interleaved rounds")
    autotune.train(cfg, params={"epochs": 1})  # the dataset read and cached, kernels warm
    arms = {"(b) autotune.train, crop + flip on the device": aug,
            "(b') autotune.train, channels_last": {**aug, "channels_last": True},
            "autotune.train without augmentation": {}}
    runs: dict[str, list[tuple[float, float, float]]] = {"(a)": [], **{k: [] for k in arms}}
    for seed in range(args.repeats):
        runs["(a)"].append(tutorial_loop(cfg, seed, args.image_epochs))
        for name, settings in arms.items():
            r = autotune.train(cfg, params=settings, seed=seed)
            runs[name].append((r.samples_per_s, r.val_accuracy, r.data_wait_fraction))
    med = {k: tuple(statistics.median(r[i] for r in v) for i in range(3)) for k, v in runs.items()}
    base = med["(a)"][0]
    print(f"\n{'arm':<50}{'samples/s':>11}{'vs (a)':>9}{'val acc':>9}{'data wait':>11}")
    print(f"{'(a) tutorial loop (CPU transforms, 2 workers)':<50}{base:>11,.0f}{1:>8.2f}x{med['(a)'][1]:>9.4f}"
          f"{med['(a)'][2]:>10.1%}")
    for name in arms:
        sps, acc, wait = med[name]
        print(f"{name:<50}{sps:>11,.0f}{sps / base:>8.2f}x{acc:>9.4f}{wait:>10.1%}")
    with_aug = med["(b) autotune.train, crop + flip on the device"][0]
    without = med["autotune.train without augmentation"][0]
    aug_cost = 1 - with_aug / without
    print(f"\nwhere the time goes: (a) waits for its DataLoader {med['(a)'][2]:.1%} of the time; in (b) the "
          f"on-device crop + flip costs {aug_cost:.1%} of samples/s (vs the same run without augmentation)")
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--synthetic", action="store_true", help="3x32x32 synthetic images (20k) instead of digits")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile arm (slow to compile on CPU)")
    ap.add_argument("--images", action="store_true", help="the 32x32x3 workload (resnet, CIFAR format, augmentation)")
    ap.add_argument("--image-epochs", type=int, default=3)
    ap.add_argument("--n-images", type=int, default=2560)
    args = ap.parse_args()
    if args.images:
        images_main(args)
        return
    cfg = make_cfg(args.device, args.synthetic)
    dev = accel.resolve_device(cfg.train["device"])
    print(f"device: {accel.device_name(dev)}; torch {torch.__version__}; {EPOCHS} epochs, batch {BATCH}, "
          f"Adam {LR:g}; median of {args.repeats}; data: {cfg.data.name}")
    autotune.train(cfg, params={"epochs": 1})  # warm caches (dataset, kernels) before any timing

    arms: dict[str, dict[str, Any]] = {
        "autotune defaults (data on device)": {},
        "+ channels_last": {"channels_last": True},
        "+ bf16": {"precision": "bf16"},
        "+ fp16": {"precision": "fp16"},
        "data_on_device: false (DataLoader)": {"data_on_device": False},
        "cpu_threads: 1": {"cpu_threads": 1},
        "channels_last + cpu_threads: 1": {"channels_last": True, "cpu_threads": 1},
        "batch_size 128": {"batch_size": 128},
        "batch_size 256": {"batch_size": 256},
    }
    if dev.type == "cuda":
        arms["+ channels_last + bf16"] = {"channels_last": True, "precision": "bf16"}
        arms["matmul_precision high (TF32)"] = {"matmul_precision": "high"}
    if not args.no_compile:
        arms["+ compile"] = {"compile": True}
        arms["+ compile + channels_last"] = {"compile": True, "channels_last": True}
    # Rounds, not arms one after another: every round runs (a) and each arm once, so a slow spell of
    # this shared machine hits all of them alike; each figure is the median over rounds.
    runs: dict[str, list[tuple[float, ...]]] = {"(a)": [], **{k: [] for k in arms}}
    for seed in range(args.repeats):
        runs["(a)"].append(plain_loop(cfg, seed))
        for name, settings in arms.items():
            runs[name].append(autotune_run(cfg, seed, **settings))
    med = {k: tuple(statistics.median(r[i] for r in v) for i in range(len(v[0]))) for k, v in runs.items()}
    base_sps, base_acc = med["(a)"]
    print(f"\n(a) plain PyTorch loop: {base_sps:,.0f} samples/s, val accuracy {base_acc:.4f}")
    measured = {k: med[k] for k in arms}
    print(f"\n{'setting':<38}{'samples/s':>12}{'vs (a)':>9}{'val acc':>9}{'d acc':>8}{'compile s':>10}")
    for name, (sps, acc, comp) in measured.items():
        print(f"{name:<38}{sps:>12,.0f}{sps / base_sps:>8.2f}x{acc:>9.4f}{(acc - base_acc) * 100:>+7.1f}p"
              f"{comp:>10.1f}")

    # (b): the fastest batch-64 arm within 0.5 points of (a)'s accuracy
    same_recipe = {k: v for k, v in measured.items() if "batch_size" not in k}
    ok = {k: v for k, v in same_recipe.items() if v[1] >= base_acc - 0.005} or same_recipe
    best_name = max(ok, key=lambda k: ok[k][0])
    b_sps, b_acc, _ = ok[best_name]
    print(f"\n(b) autotune.train, best settings here [{best_name}]: {b_sps:,.0f} samples/s, val accuracy {b_acc:.4f}")
    print(f"(b)/(a) = {b_sps / base_sps:.2f}x at accuracy {(b_acc - base_acc) * 100:+.1f} points (goal >= 2.0x, "
          f"within 0.5 points)")
    fps = flops_per_sample(cfg)
    peak = matmul_gflops(dev)
    achieved = fps * b_sps / 1e9
    print(f"(b) achieved {achieved:.1f} GFLOP/s of conv/linear work ({fps / 1e6:.2f} MFLOP per sample, fwd+bwd) "
          f"vs {peak:.1f} GFLOP/s for a 2048x2048 fp32 matmul: {achieved / peak:.1%} of the matmul limit")


if __name__ == "__main__":
    main()
