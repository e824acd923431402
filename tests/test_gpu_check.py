"""bench/gpu_check.py runs unattended on a rarely lent GPU: its configs and model must stay valid here.

(The check itself, end to end on CPU: `bash bench/gpu_check.sh --device cpu`, minutes; not a test. Its section 4,
autotune as a guest, is: each of its parts runs here on the CPU.)
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest
import torch

from autotune import config
from autotune.search import space
from autotune.study import runner as study
from autotune.training import models
from autotune.training.data import registry as data

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gpu_check() -> ModuleType:
    return importlib.import_module("bench.gpu_check")


@pytest.mark.parametrize("device", ["cuda", "cpu"])
@pytest.mark.parametrize("kind", ["resnet", "cnn"])
def test_row_configs_build_their_model(gpu_check: ModuleType, device: str, kind: str) -> None:
    sizes = gpu_check.SIZES[device]
    cfg = gpu_check.run_cfg(device, kind, sizes)
    n_train = round(sizes.n_samples * (1 - cfg.data.val_fraction))
    assert n_train % sizes.batch == 0  # no smaller last batch for compiled rows to recompile on
    model = models.build(cfg.model, (3, 32, 32), 10, 0.0, "default")
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    for _, params in gpu_check.ROWS + gpu_check.COMPILE_ROWS:
        assert set(params) <= set(cfg.fixed())  # every row sets known trainer settings


def test_resnet_is_big_enough_not_to_be_launch_bound(gpu_check: ModuleType) -> None:
    cfg = gpu_check.run_cfg("cuda", "resnet", gpu_check.SIZES["cuda"])
    assert gpu_check.flops_per_sample(cfg) > 2e9  # > 1 TFLOP of work per 512-image step


def test_study_config_is_a_12_cell_grid_with_cpu_overrides(gpu_check: ModuleType, tmp_path: Path) -> None:
    over = {"train.device": "cpu", "study.storage": f"sqlite:///{tmp_path}/g.db", **gpu_check.SIZES["cpu"].study}
    cfg = config.load(ROOT / "bench" / "gpu_check.yaml", over)
    assert set(cfg.space) == {"precision", "channels_last", "compile"} and cfg.study.n_trials == 6
    assert len(list(_cells(space.grid(cfg)))) == 12
    study.validate(cfg)
    ds = data.load(cfg.data, cfg.source)
    assert len(ds.y_train) % cfg.train["batch_size"] == 0


def _cells(grid: dict[str, list[object]]) -> list[tuple[object, ...]]:
    import itertools

    return list(itertools.product(*grid.values()))


def test_ddp_section_runs_on_the_cpu(gpu_check: ModuleType, tmp_path: Path) -> None:
    """The several-devices rows, on the CPU path (gloo, 2 processes): both rows measured, the second on 2 ranks."""
    chk = gpu_check.Check(torch.device("cpu"), tmp_path, None)
    gpu_check.ddp(chk, "cpu", gpu_check.SIZES["cpu"])
    one, two = chk.figures["ddp"]
    assert "error" not in one and "error" not in two, chk.figures["ddp"]
    assert two["launcher"] and two["device"].startswith(f"{two['devices']} x cpu")
    assert one["samples_per_s"] > 0 and two["samples_per_s"] > 0 and two["vs_one"] > 0
    assert (tmp_path / "gpu_check.json").exists()


# ---------------------------------------------------------------- section 4, autotune as a guest (bench/gpu_guest.py)


@pytest.fixture(scope="module")
def gpu_guest() -> ModuleType:
    return importlib.import_module("bench.gpu_guest")


def _rows(chk: object, section: str) -> list[dict[str, object]]:
    return [r for r in chk.figures.get("guest", []) if r["section"] == section]  # type: ignore[attr-defined]


@pytest.mark.slow  # (7-14 s of real processes: the default run stays under 10 minutes)
def test_the_hang_in_a_native_call_section_runs_on_the_cpu(gpu_check: ModuleType, gpu_guest: ModuleType,
                                                           tmp_path: Path) -> None:
    """On a GPU: a synchronize on a long kernel; here one long matmul. Shorter than the grace, the trial stops at
    the call's end; longer, the watch records it and the run stops (StuckTrial); this process goes on either way."""
    chk = gpu_check.Check(torch.device("cpu"), tmp_path, None)
    gpu_guest.hang_in_sync(chk, "cpu")
    short, long = _rows(chk, "hang_in_sync")
    assert "error" not in short and "error" not in long, chk.figures["guest"]
    assert (short["state"], short["stop_reason"], short["run"]) == ("PRUNED", "hang", "returned")
    assert (long["state"], long["stop_reason"], long["run"]) == ("PRUNED", "hang", "StuckTrial")


def test_the_step_hook_section_runs_on_the_cpu(gpu_check: ModuleType, gpu_guest: ModuleType, tmp_path: Path) -> None:
    chk = gpu_check.Check(torch.device("cpu"), tmp_path, None)
    gpu_guest.step_hooks(chk, "cpu")
    rows = _rows(chk, "step_hooks")
    assert len(rows) == 6 and not [r for r in rows if "error" in r], rows
    for r in rows:  # every step counted, what was searched applied, no hook left on the optimizer
        assert r["steps"] == r["expected_steps"] and r["hooks_left"] == 0, r
        assert not set(r["not_applied"]) & set(r["searched"]), r  # type: ignore[call-overload]
    assert {r["kernel"] for r in rows} >= {"fused"}  # (CPU: fused Adam/AdamW/SGD; foreach only on a GPU)


def test_the_frameworks_in_bf16_section_runs_on_the_cpu(gpu_check: ModuleType, gpu_guest: ModuleType,
                                                        tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("lightning")
    chk = gpu_check.Check(torch.device("cpu"), tmp_path, None)
    gpu_guest.frameworks_bf16(chk, "cpu")
    rows = _rows(chk, "frameworks_bf16")
    assert [r["example"] for r in rows] == ["hf_text.yaml", "digits_lightning.yaml"]
    for r in rows:
        assert "error" not in r and r["precision"] == "bf16" and "precision" not in r["not_applied"], r
