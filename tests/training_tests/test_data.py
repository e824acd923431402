"""Datasets from disk (image folders, CIFAR batches), the bundled ones, the uint8/normalize contract,
regression targets, and the sanity checks every dataset passes before the first trial."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from autotune import config
from autotune.core.errors import ConfigError
from autotune.training.data import images, sources
from autotune.training.data import registry as data
from tests.support import write_cifar10, write_folder


def folder_cfg(root: Path, cache: Path, **kw: object) -> config.DataConfig:
    return config.from_dict({"data": {"name": "image_folder", "path": str(root), "cache_dir": str(cache), **kw}}).data


def load(cfg: config.DataConfig, task: str = "classification") -> data.Dataset:
    data._load_cached.cache_clear()  # each test reads its files afresh
    return data.load(cfg, "<config>", task)


def test_image_folder_uint8_normalized_per_batch(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "imgs")
    ds = load(folder_cfg(root, tmp_path / "cache", val_fraction=0.25))
    assert ds.x_train.dtype == torch.uint8 and ds.input_shape == (3, 12, 12)
    assert ds.is_uint8 and ds.n_classes == 3 and ds.classes == ("blue", "green", "red")
    assert len(ds.y_train) + len(ds.y_val) == 24 and len(ds.y_val) == 6
    assert sorted(torch.bincount(ds.y_val).tolist()) == [2, 2, 2]  # stratified
    xb = ds.x_train[:5]
    out = ds.normalize(xb)
    expected = (xb.float() / 255 - ds.mean) / ds.std
    assert out.dtype == torch.float32 and torch.allclose(out, expected, atol=1e-5)
    whole = ds.normalize(ds.x_train)  # the training split's statistics: mean 0, std 1 per channel
    assert torch.allclose(whole.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-4)
    assert torch.allclose(whole.std(dim=(0, 2, 3), correction=0), torch.ones(3), atol=1e-3)
    cl = ds.normalize(xb.contiguous(memory_format=torch.channels_last))
    assert cl.is_contiguous(memory_format=torch.channels_last)


def test_float_datasets_pass_through_normalize() -> None:
    ds = load(config.DataConfig())
    xb = ds.x_train[:4]
    assert ds.x_train.dtype == torch.float32 and ds.mean is None and ds.normalize(xb) is xb


def test_decoded_once_then_read_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_folder(tmp_path / "imgs", n=4)
    cache = tmp_path / "cache"
    cfg = folder_cfg(root, cache)
    first = load(cfg)
    files = list(cache.glob("image_folder-*.pt"))
    assert len(files) == 1 and not list(cache.glob("*.tmp"))

    def no_decoding(*a: object, **k: object) -> None:
        raise AssertionError("decoded again although nothing changed")

    with monkeypatch.context() as m:
        m.setattr(images, "_decode_images", no_decoding)
        again = load(cfg)
    assert torch.equal(first.x_train, again.x_train)
    # A changed file (new modification time) is a different key: decoded again, a second cache file.
    target = root / "blue" / "000.png"
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 10**9))
    load(cfg)
    assert len(list(cache.glob("image_folder-*.pt"))) == 2


def test_image_size_resizes_and_gray_folders_keep_one_channel(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "imgs", n=4, size=(16, 10), gray=True)
    ds = load(folder_cfg(root, tmp_path / "c", image_size=8))
    assert ds.input_shape == (1, 8, 8) and ds.x_train.dtype == torch.uint8
    from PIL import Image  # one colour image among gray ones: every image becomes RGB

    Image.fromarray(np.zeros((10, 16, 3), np.uint8) + 90).save(root / "red" / "colour.png")
    assert load(folder_cfg(root, tmp_path / "c", image_size=8)).input_shape == (3, 8, 8)


def test_image_folder_layout_errors(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "imgs", n=2)
    (root / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"data\.path: .*imgs/empty: no image files \(\.png, \.jpg"):
        load(folder_cfg(root, tmp_path / "c"))
    lonely = tmp_path / "one"
    (lonely / "only").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"one sub-folder of images per class, at least two .*found 1: only"):
        load(folder_cfg(lonely, tmp_path / "c"))
    with pytest.raises(ConfigError, match=r"data\.path: no such folder: .*nowhere"):
        load(folder_cfg(tmp_path / "nowhere", tmp_path / "c"))
    assert not (tmp_path / "c").exists()  # nothing cached from a folder that failed


# ---------------------------------------------------------------- CIFAR python batches


def cifar_cfg(name: str, path: Path) -> config.DataConfig:
    return config.from_dict({"data": {"name": name, "path": str(path), "val_fraction": 0.2}}).data


def test_cifar10_folder(tmp_path: Path) -> None:
    folder = write_cifar10(tmp_path)
    ds = load(cifar_cfg("cifar10", folder))
    assert ds.x_train.dtype == torch.uint8 and ds.input_shape == (3, 32, 32)
    assert len(ds.y_train) + len(ds.y_val) == 60 and ds.n_classes == 10 and ds.classes[0] == "airplane"
    assert ds.mean is not None and ds.mean.shape == (1, 3, 1, 1)
    # the parent folder (where the archive was extracted) works too
    assert load(cifar_cfg("cifar10", tmp_path)).input_shape == (3, 32, 32)
    # pixels keep CIFAR's layout: the first 1024 bytes of a row are the red plane
    with open(folder / "data_batch_1", "rb") as f:
        raw = pickle.load(f, encoding="bytes")[b"data"]
    assert torch.equal(data.load(cifar_cfg("cifar10", folder)).x_train.new_tensor(raw[0, :1024]).view(32, 32),
                       torch.from_numpy(raw[0, :1024].reshape(32, 32)))


def test_cifar100_folder(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    rng = np.random.default_rng(2)
    n = 40
    with open(folder / "train", "wb") as f:
        pickle.dump({b"fine_labels": [i % 4 for i in range(n)], b"coarse_labels": [0] * n,
                     b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8)}, f)
    ds = load(cifar_cfg("cifar100", tmp_path))
    assert ds.n_classes == 4 and ds.input_shape == (3, 32, 32) and ds.classes == ()


def test_partial_cifar_folder_names_what_is_missing(tmp_path: Path) -> None:
    folder = write_cifar10(tmp_path)
    (folder / "data_batch_3").unlink()
    (folder / "data_batch_5").unlink()
    with pytest.raises(ConfigError, match=r"data\.path: .* is not a complete CIFAR-10 python folder: missing "
                                          r"data_batch_3, data_batch_5; .*cifar-10-python\.tar\.gz .*kriz/cifar\.html"):
        load(cifar_cfg("cifar10", folder))


def test_cifar_batch_that_would_run_code_is_refused(tmp_path: Path) -> None:
    folder = write_cifar10(tmp_path)

    class Evil:
        def __reduce__(self) -> tuple:
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    with open(folder / "data_batch_2", "wb") as f:
        pickle.dump({b"data": Evil(), b"labels": []}, f)
    with pytest.raises(ConfigError, match=r"data_batch_2: cannot read as a CIFAR python batch: UnpicklingError: "
                                          r"refusing (posix|os)\.system"):
        load(cifar_cfg("cifar10", folder))
    assert not (tmp_path / "pwned").exists()


def test_cifar_batch_of_the_wrong_shape(tmp_path: Path) -> None:
    folder = write_cifar10(tmp_path)
    with open(folder / "data_batch_4", "wb") as f:
        pickle.dump({b"data": np.zeros((3, 100), np.uint8), b"labels": [0, 1, 2]}, f)
    with pytest.raises(ConfigError, match=r"data_batch_4: not a CIFAR-10 batch \(needs 'data' of shape \(N, 3072\)"):
        load(cifar_cfg("cifar10", folder))


# ---------------------------------------------------------------- labels, targets, sanity


def test_integer_labels_become_class_indices(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, y=np.repeat([3, 7], 20))
    ds = load(config.from_dict({"data": {"name": "npz", "path": str(tmp_path / "d.npz")}}).data)
    assert ds.n_classes == 2 and set(ds.y_train.tolist()) == {0, 1} and ds.y_train.dtype == torch.int64


def test_diabetes_regression_targets_standardized() -> None:
    cfg = config.from_dict({"task": "regression", "data": {"name": "diabetes"}, "model": {"name": "mlp"}})
    ds = load(cfg.data, "regression")
    assert ds.task == "regression" and ds.n_classes == 0 and ds.n_outputs == 1
    assert ds.y_train.shape == (353, 1) and ds.y_train.dtype == torch.float32
    assert abs(float(ds.y_train.mean())) < 1e-5 and abs(float(ds.y_train.std(correction=0)) - 1) < 1e-4
    from sklearn.datasets import load_diabetes

    original = load_diabetes().target
    back = ds.targets_in_units(torch.cat([ds.y_train, ds.y_val]))[:, 0].double()
    assert sorted(np.round(back.numpy(), 3)) == sorted(np.round(original, 3))


def test_regression_several_targets_and_plain_subset(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 4)).astype(np.float32)
    np.savez(tmp_path / "r.npz", x=x, y=np.stack([x.sum(1), x[:, 0] * 10], 1))
    ds = load(config.from_dict({"task": "regression", "data": {"name": "npz", "path": str(tmp_path / "r.npz")},
                                "model": {"name": "mlp"}}).data, "regression")
    assert ds.n_outputs == 2 and ds.y_mean is not None and ds.y_mean.shape == (2,)
    from autotune.training.context.loaders import fraction_indices

    keep = fraction_indices(len(ds.y_train), 0.5, 0, ds.y_train)  # not stratified: targets are not classes
    assert keep is not None and len(keep) == 20 and ds.y_train[keep].shape[1] == 2


def test_split_too_small_for_the_classes(tmp_path: Path) -> None:
    x = np.zeros((12, 2), np.float32) + np.arange(12)[:, None]
    np.savez(tmp_path / "s.npz", x=x, y=np.arange(12) % 6)
    with pytest.raises(ConfigError, match=r"s\.npz: 12 samples at val_fraction 0\.2 leave 3 for validation and 9 "
                                          r"for training: each split needs one sample of each of the 6 classes"):
        load(config.from_dict({"data": {"name": "npz", "path": str(tmp_path / "s.npz")}}).data)


@pytest.mark.parametrize("x, y, match", [
    (np.array([["a", "b"]] * 10), np.arange(10) % 2, r"x must hold numbers; got dtype <U1"),
    (np.ones((10, 2, 2, 2, 2), np.float32), np.arange(10) % 2, r"need x of shape \(N, F\), .*got x \(10, 2, 2, 2, 2\)"),
    (np.ones((10, 2), np.float32), np.ones((10, 2)), r"need x .*and y of shape \(N,\); got x \(10, 2\), y \(10, 2\)"),
])
def test_check_arrays_shapes_and_types(x: np.ndarray, y: np.ndarray, match: str) -> None:
    with pytest.raises(ConfigError, match=r"f\.yaml: data\.path: d\.npz: " + match):
        data.check_arrays(x, y, "classification", 0.2, "f.yaml", "data.path", "d.npz")


# The built-in datasets docs/guide/yaml.md's `data.name` documents (digits | mnist1d | synthetic | npz | image_folder |
# cifar10 | cifar100 | diabetes): a name added or dropped is a change the docs must follow.
README_DATASETS = {"digits", "mnist1d", "synthetic", "npz", "image_folder", "cifar10", "cifar100", "diabetes"}


def test_config_dataset_names_are_the_documented_loaders() -> None:
    assert set(config.dataset_names()) == README_DATASETS
    assert len(config.dataset_names()) == len(README_DATASETS)  # no name twice
    assert set(DATASET_FILES) == README_DATASETS  # each is loaded by test_every_dataset_loads below
    with pytest.raises(ConfigError, match=r"data\.name: give a dataset name \(") as info:  # the names it offers
        config.from_dict({"data": {"name": None}})
    assert set(str(info.value).split("(")[1].split(")")[0].split(", ")) == README_DATASETS


def test_uint8_npz_stays_float_standardized(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "u.npz", x=rng.integers(0, 256, (40, 1, 4, 4), dtype=np.uint8), y=np.arange(40) % 2)
    ds = load(config.from_dict({"data": {"name": "npz", "path": str(tmp_path / "u.npz")}}).data)
    assert ds.x_train.dtype == torch.float32 and ds.mean is None


def test_npz_that_is_text_or_a_single_npy_array(tmp_path: Path) -> None:
    (tmp_path / "t.npz").write_text("x,y\n1,2\n")
    with pytest.raises(ConfigError, match=r"data\.path: cannot read .*t\.npz as \.npz: not a NumPy file"):
        load(config.DataConfig(name="npz", path=str(tmp_path / "t.npz")))
    with open(tmp_path / "a.npz", "wb") as f:
        np.save(f, np.zeros(3))
    with pytest.raises(ConfigError, match=r"a\.npz holds one array \(np\.save\); save x and y with np\.savez"):
        load(config.DataConfig(name="npz", path=str(tmp_path / "a.npz")))


def test_data_is_copied_to_a_device_once_per_process() -> None:
    """Every trial of a study trains on the same data: the copy to a device is made once (CPU: no copy)."""
    ds = data.load(config.DataConfig(name="digits"))
    cpu = ds.on(torch.device("cpu"))
    assert cpu[0] is ds.x_train and cpu[3] is ds.y_val
    meta = torch.device("meta")  # a device with no memory behind it: what a GPU copy would go through
    first = ds.on(meta)
    assert first[0].device.type == "meta" and first[0].shape == ds.x_train.shape
    assert all(a is b for a, b in zip(first, ds.on(meta)))


def test_a_user_data_factory_loads_with_its_kwargs_and_trains() -> None:
    import autotune
    from tests import factories

    cfg = config.from_dict({"data": {"factory": "tests.factories:blobs", "kwargs": {"n": 400, "n_features": 5},
                                     "val_fraction": 0.25},
                            "model": {"name": "mlp", "hidden": 16},
                            "train": {"epochs": 5, "lr": 1e-2, "batch_size": 32}})
    ds = load(cfg.data)
    assert ds.input_shape == (5,) and ds.n_classes == 3 and ds.task == "classification"
    assert (len(ds.y_train), len(ds.y_val)) == (300, 100)  # the kwargs reached the factory; the split is 3:1
    _, y = factories.blobs(400, 5)
    assert sorted(torch.cat([ds.y_train, ds.y_val]).tolist()) == sorted(y.tolist())  # the factory's own labels
    assert abs(float(ds.x_train.mean())) < 0.1  # standardized on the training split, as every float dataset
    assert autotune.train(cfg).val_accuracy > 0.9  # the blobs are 2 standard deviations apart: learnable


# ---------------------------------------------------------------- the registry: every dataset loads


def _write_npz(root: Path) -> dict[str, object]:
    rng = np.random.default_rng(3)
    np.savez(root / "d.npz", x=rng.normal(size=(60, 5)).astype(np.float32), y=np.arange(60) % 3)
    return {"path": str(root / "d.npz")}


def _write_cifar100(root: Path) -> dict[str, object]:
    folder = root / "cifar-100-python"
    folder.mkdir()
    with open(folder / "train", "wb") as f:
        pickle.dump({b"fine_labels": [i % 4 for i in range(40)], b"coarse_labels": [0] * 40,
                     b"data": np.random.default_rng(2).integers(0, 256, (40, 3072), dtype=np.uint8)}, f)
    return {"path": str(root)}


# name -> what its files (if any) are, written under tmp_path; the data section's keys. A dataset added to the
# registry without a row here fails the contract test (KeyError).
DATASET_FILES: dict[str, Callable[[Path], dict[str, object]]] = {
    "digits": lambda root: {},
    "synthetic": lambda root: {"n_samples": 60, "shape": [1, 4, 4], "n_classes": 3},
    "npz": _write_npz,
    "image_folder": lambda root: {"path": str(write_folder(root / "imgs", n=6)), "cache_dir": str(root / "c")},
    "cifar10": lambda root: {"path": str(write_cifar10(root))},
    "cifar100": _write_cifar100,
    "diabetes": lambda root: {},
    "mnist1d": lambda root: {"cache_dir": str(root / "c"), "kwargs": {"num_samples": 200}},
}


@pytest.mark.parametrize("name", data.DATASETS)
def test_every_dataset_loads(name: str, tmp_path: Path) -> None:
    section = DATASET_FILES[name](tmp_path)
    task = data.DATASETS[name].task or "classification"
    cfg = config.from_dict({"task": task, "data": {"name": name, **section}})
    ds = load(cfg.data, task)
    assert len(ds.x_train) > 0 and len(ds.x_val) > 0 and len(ds.x_train) == len(ds.y_train)
    assert tuple(ds.x_train.shape[1:]) == ds.input_shape
    if task == "classification":
        assert ds.n_classes >= 2 and int(ds.y_train.max()) < ds.n_classes
    else:
        assert ds.y_train.is_floating_point() and ds.n_outputs >= 1


def test_unknown_dataset_is_one_line_with_close_match() -> None:
    with pytest.raises(ConfigError) as info:
        config.from_dict({"data": {"name": "digit"}})
    assert str(info.value) == "<config>: data.name: unknown dataset 'digit' (did you mean 'digits'?); allowed: " + \
        ", ".join(sorted(data.DATASETS)) + " (or data.factory)"


def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("MNIST-1D must be generated, never downloaded")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_mnist1d_is_generated_offline_then_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_network(monkeypatch)
    monkeypatch.chdir(tmp_path)  # nothing lands in the working folder (mnist1d's own default pickle path)
    np.random.seed(7)
    before = np.random.rand()
    np.random.seed(7)
    cfg = config.from_dict({"data": {"name": "mnist1d", "cache_dir": str(tmp_path / "c")}})
    ds = load(cfg.data)
    assert np.random.rand() == before  # mnist1d seeds NumPy's global generator: its state is put back
    assert ds.input_shape == (40,) and ds.n_classes == 10
    assert (len(ds.x_train), len(ds.x_val)) == (4000, 1000)  # the paper's 4000 / 1000 at val_fraction 0.2
    assert [p.name for p in tmp_path.iterdir()] == ["c"] and len(list((tmp_path / "c").glob("mnist1d-*.npz"))) == 1
    import mnist1d.data

    monkeypatch.setattr(mnist1d.data, "make_dataset", lambda *a, **k: pytest.fail("generated twice"))
    again = load(cfg.data)
    assert torch.equal(again.x_train, ds.x_train) and torch.equal(again.y_val, ds.y_val)
    other = load(config.from_dict({"data": {"name": "mnist1d", "cache_dir": str(tmp_path / "c"),
                                            "kwargs": {"num_samples": 5000}}}).data)
    assert torch.equal(other.x_train, ds.x_train)  # the same arguments spelled out: the same cache file
    with pytest.raises(ConfigError, match=r"data\.kwargs\.num_sample: not an mnist1d generation argument; "
                                          r"corr_noise_scale, .*num_samples"):
        load(config.from_dict({"data": {"name": "mnist1d", "kwargs": {"num_sample": 10}}}).data)


def test_mnist1d_missing_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "mnist1d.data", None)  # import mnist1d.data raises ImportError
    with pytest.raises(ConfigError, match=r"^<config>: data\.name: the mnist1d dataset needs the mnist1d package: "
                                          r"pip install mnist1d \(or autotune\[mnist1d\]\)$"):
        sources._mnist1d_data("<config>")


def test_mnist1d_trains_above_chance_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune

    _no_network(monkeypatch)
    for name, floor in (("mlp", 0.3), ("cnn1d", 0.5)):  # chance is 0.1; the CNN learns the shifts far faster
        cfg = config.from_dict({"study": {"storage": f"sqlite:///{tmp_path}/m.db"},
                                "data": {"name": "mnist1d", "cache_dir": str(tmp_path / "c")},
                                "model": {"name": name}, "train": {"device": "cpu", "epochs": 3, "lr": 3e-3,
                                                                   "optimizer": "adam", "batch_size": 64}})
        tr = autotune.train(cfg, params={})
        assert tr.val_accuracy > floor, (name, tr.val_accuracy)
