"""On-device augmentation: each op against a plain reference, per-sample randomness, reproducibility."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from autotune import config
from autotune.core.errors import ConfigError
from autotune.spec import Settings
from autotune.study.runner import validate
from autotune.training.data import augment

CPU = torch.device("cpu")


def batch(n: int = 16, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, 3, 8, 10), generator=g)
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_crop_is_a_window_of_the_reflect_padded_image(dtype: torch.dtype) -> None:
    x = batch(dtype=dtype)
    out = augment.crop_flip(x, 3, False, augment.generator(CPU, 1))
    padded = F.pad(x.float(), (3, 3, 3, 3), mode="reflect")
    shifts = set()
    for i in range(len(x)):  # the reference: find the window each sample was cut from
        hits = [(dy, dx) for dy in range(7) for dx in range(7)
                if torch.equal(padded[i, :, dy: dy + 8, dx: dx + 10], out[i].float())]
        assert hits, f"sample {i} is not a window of its padded image"
        shifts.add(hits[0])
    assert out.dtype == dtype and len(shifts) > 4  # offsets drawn per sample


def test_flip_flips_about_half_the_samples() -> None:
    x = batch(256)
    out = augment.crop_flip(x, 0, True, augment.generator(CPU, 2))
    same = [torch.equal(out[i], x[i]) for i in range(len(x))]
    flipped = [torch.equal(out[i], x[i].flip(-1)) for i in range(len(x))]
    assert all(s or f for s, f in zip(same, flipped))
    assert 90 < sum(flipped) < 166


def test_cutout_zeroes_one_square_per_sample() -> None:
    x = batch(64) + 1  # no zeros to begin with
    out = augment.cutout(x, 4, augment.generator(CPU, 3))
    zeros = (out == 0).all(dim=1)  # (N, H, W): a zeroed pixel is zero in every channel
    assert torch.equal(out[~zeros[:, None].expand_as(out)], x[~zeros[:, None].expand_as(x)])
    for z in zeros:
        rows, cols = z.any(1).nonzero().flatten(), z.any(0).nonzero().flatten()
        assert 0 < z.sum() <= 16 and z.sum() == len(rows) * len(cols)  # one (clipped) rectangle
        assert len(rows) <= 4 and len(cols) <= 4
    assert (zeros.sum(dim=(1, 2)) == 16).float().mean() > 0.3  # most squares lie whole inside


def test_apply_reproducible_and_off_is_free() -> None:
    x = batch()
    s = Settings({"aug_crop_padding": 2, "aug_flip": True, "aug_cutout": 3})
    a = augment.apply(x, s, augment.generator(CPU, 5))
    b = augment.apply(x, s, augment.generator(CPU, 5))
    c = augment.apply(x, s, augment.generator(CPU, 6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert augment.apply(x, Settings(), augment.generator(CPU, 5)) is x


def test_channels_last_in_channels_last_out() -> None:
    x = batch()
    cl = x.contiguous(memory_format=torch.channels_last)
    a = augment.crop_flip(x, 2, True, augment.generator(CPU, 7))
    b = augment.crop_flip(cl, 2, True, augment.generator(CPU, 7))
    assert torch.equal(a, b) and b.is_contiguous(memory_format=torch.channels_last) and a.is_contiguous()
    assert augment.cutout(cl, 3, augment.generator(CPU, 7)).is_contiguous(memory_format=torch.channels_last)


def test_check_and_preflight_messages(tmp_path) -> None:
    assert augment.check(Settings({"aug_flip": True}), (10,)) == \
        "aug_flip needs image inputs (C, H, W); this data is (10,)"
    assert augment.check(Settings({"aug_crop_padding": 4}), (1, 8, 8)) is None
    assert "smaller than the image side 8" in augment.check(Settings({"aug_crop_padding": 8}), (1, 8, 8))
    cfg = config.from_dict({"study": {"storage": f"sqlite:///{tmp_path}/x.db"},
                            "space": {"aug_crop_padding": {"type": "categorical", "choices": [0, 4, 9]}}})
    with pytest.raises(ConfigError, match=r"space\.aug_crop_padding: aug_crop_padding must be smaller than the "
                                          r"image side 8 \(reflect padding\); got 9"):
        validate(cfg)


@pytest.mark.gpu
def test_on_cuda_without_a_host_sync() -> None:
    dev = torch.device("cuda")
    x = batch(512, torch.uint8).to(dev)
    gen = augment.generator(dev, 0)
    s = Settings({"aug_crop_padding": 4, "aug_flip": True, "aug_cutout": 8})
    augment.apply(x, s, gen)  # warm-up (allocations)
    torch.cuda.set_sync_debug_mode("error")  # any op that waits for the device raises
    try:
        out = augment.apply(x, s, gen)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.device == dev and out.shape == x.shape
    cpu = augment.apply(x.cpu(), s, augment.generator(CPU, 0))
    assert cpu.shape == out.shape
