"""What does on-device augmentation cost per batch? Each augmentation (autotune/training/data/augment.py) against no
augmentation, on 3x32x32 uint8 batches (CIFAR-sized), in the same run:

  (a) per batch, input side only: `normalize` alone (the baseline) vs `normalize` + each augmentation,
      and the same augmentations written as a per-sample Python loop (what a Dataset transform does);
  (b) per training step: a ResNet-20 (width 16) forward + backward + Adam step, without and with every
      augmentation on, so the ratio is what samples_per_s loses; and the augmentations' share of a
      step computed from (a) (on a CPU that share is far below the step's own run-to-run noise).

Arms are interleaved within each round. (a) reports the fastest of --repeats rounds (each arm three
calls in a row per round, so its buffers are reused as in a training loop): these are milliseconds
of fixed work, and on a shared machine the slower rounds measure the other processes; (b) the median.

    python bench/augment.py [--device cpu|cuda] [--batch 512] [--step-batch 128] [--repeats 30] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from autotune.spec import Settings
from autotune.training import accel, models
from autotune.training.data import augment

ALL = Settings({"aug_crop_padding": 4, "aug_flip": True, "aug_cutout": 8})
ARMS = {
    "none (normalize only)": Settings(),
    "crop, pad 4": Settings({"aug_crop_padding": 4}),
    "flip": Settings({"aug_flip": True}),
    "cutout 8": Settings({"aug_cutout": 8}),
    "crop + flip + cutout": ALL,
}


def per_sample_loop(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The same three augmentations one image at a time, as a Dataset's transform would do them."""
    out = torch.empty_like(x)
    h, w = x.shape[2:]
    for i in range(len(x)):
        img = F.pad(x[i: i + 1], (4, 4, 4, 4), mode="reflect")[0]
        dy, dx = (int(v) for v in torch.randint(0, 9, (2,), generator=gen))
        img = img[:, dy: dy + h, dx: dx + w]
        if float(torch.rand((), generator=gen)) < 0.5:
            img = img.flip(-1)
        cy, cx = (int(v) for v in torch.randint(0, h, (2,), generator=gen))
        img = img.clone()
        img[:, max(0, cy - 4): cy + 4, max(0, cx - 4): cx + 4] = 0
        out[i] = img
    return out


def timed(fn: Callable[[], object], dev: torch.device) -> float:
    accel.synchronize(dev)
    t0 = time.perf_counter()
    fn()
    accel.synchronize(dev)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--step-batch", type=int, default=128, help="batch of the training steps in (b)")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    xb = torch.randint(0, 256, (args.batch, 3, 32, 32), generator=g, dtype=torch.uint8).to(dev)
    mean = torch.tensor([0.49, 0.48, 0.45], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([0.25, 0.24, 0.26], device=dev).view(1, 3, 1, 1)

    def normalize(x: torch.Tensor) -> torch.Tensor:
        return x.float().mul_(1 / (255 * std)).sub_(mean / std)  # what Dataset.normalize does

    gen = augment.generator(dev, 0)
    host_gen = torch.Generator().manual_seed(0)
    arms: dict[str, Callable[[], object]] = {
        name: (lambda s=s: augment.apply(normalize(xb), s, gen)) for name, s in ARMS.items()}
    arms["all, before normalize (uint8)"] = lambda: normalize(augment.apply(xb, ALL, gen))
    arms["all, per-sample Python loop"] = lambda: per_sample_loop(normalize(xb), host_gen)
    for fn in arms.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.repeats):
        for name, fn in arms.items():  # three calls in a row: the allocator reuses the arm's buffers,
            times[name].append(min(timed(fn, dev) for _ in range(3)))  # as it does step after step
    base = min(times["none (normalize only)"])
    print(f"(a) input side, batch {args.batch} x 3x32x32 uint8 on {accel.device_name(dev)}, "
          f"{args.threads} thread(s), fastest of {args.repeats}")
    print(f"{'arm':34s} {'ms/batch':>9s} {'vs none':>8s}")
    for name, ts in times.items():
        best = min(ts)
        print(f"{name:34s} {best * 1e3:9.3f} {best / base:7.2f}x")
    extra_per_sample = (min(times["crop + flip + cutout"]) - base) / args.batch

    torch.manual_seed(0)
    model = models.resnet((3, 32, 32), 10, depth=20, width=16).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sb = xb[: args.step_batch]
    yb = torch.randint(0, 10, (len(sb),), generator=g).to(dev)

    def step(settings: Settings) -> None:
        x = augment.apply(normalize(sb), settings, gen)
        loss = F.cross_entropy(model(x), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    steps = {"no augmentation": lambda: step(Settings()), "crop + flip + cutout": lambda: step(ALL)}
    for fn in steps.values():
        fn()
    st: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(max(3, args.repeats // 4)):
        for name, fn in steps.items():
            st[name].append(timed(fn, dev))
    base = statistics.median(st["no augmentation"])
    print(f"\n(b) ResNet-20 training step (forward + backward + Adam), batch {len(sb)}, "
          f"median of {len(st['no augmentation'])}")
    for name, ts in st.items():
        med = statistics.median(ts)
        print(f"{name:34s} {med * 1e3:9.1f} ms {med / base:6.3f}x   {len(sb) / med:8.0f} samples/s")
    print(f"augmentation's share of a step, from (a): {extra_per_sample * len(sb) / base:.2%}")


if __name__ == "__main__":
    main()
