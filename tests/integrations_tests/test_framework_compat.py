"""Each framework internal the adapters rely on (integrations/framework_compat.py) still exists and behaves as used,
on the installed transformers, Lightning and torch; a failure names the internal and the compat function to adapt.
A framework that is not installed skips its tests. Also: the installed releases are ones the fence was tested on, and
no other module of autotune names a framework's private attribute."""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from autotune.integrations import framework_compat as compat

ROOT = Path(__file__).resolve().parents[2]
FENCE = ROOT / "autotune" / "integrations" / "framework_compat.py"


@contextlib.contextmanager
def relied_on(framework: str, internal: str, function: str) -> Iterator[None]:
    """Turn any failure inside into one message naming the framework's internal and the compat function."""
    try:
        yield
    except Exception as e:  # an AssertionError too: the internal exists but behaves differently
        pytest.fail(f"{framework} changed {internal}, which autotune.integrations.framework_compat.{function} relies "
                    f"on ({type(e).__name__}: {e}): adapt {function}", pytrace=False)


# ---------------------------------------------------------------- torch's DataLoader


def test_end_loader_workers_ends_a_persistent_loaders_processes() -> None:
    loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=4, num_workers=1, persistent_workers=True)
    assert sum(len(b[0]) for b in loader) == 8
    with relied_on(f"torch {torch.__version__}", "DataLoader._iterator / _shutdown_workers", "end_loader_workers"):
        iterator = loader._iterator
        assert iterator is not None  # the persistent workers outlive the epoch
        workers = list(iterator._workers)
        assert workers and all(w.is_alive() for w in workers)
        compat.end_loader_workers([loader, None, DataLoader(TensorDataset(torch.zeros(2)))])
        assert loader._iterator is None and not any(w.is_alive() for w in workers)
    assert sum(len(b[0]) for b in loader) == 8  # the next epoch starts workers of its own


# ---------------------------------------------------------------- Hugging Face transformers


@pytest.fixture
def hf_trainer(tmp_path: Path) -> Any:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from transformers import Trainer

    from tests.integrations_tests import hf_scripts

    args = hf_scripts.user_args(str(tmp_path), dataloader_num_workers=1, dataloader_persistent_workers=True)
    return Trainer(model=hf_scripts.new_model(), args=args, train_dataset=hf_scripts.VAL,
                   eval_dataset=hf_scripts.VAL)


def _transformers() -> str:
    import transformers

    return f"transformers {transformers.__version__}"


def test_the_eval_loader_cache_is_what_the_trainer_evaluates_with(hf_trainer: Any) -> None:
    with relied_on(_transformers(), "Trainer._eval_dataloaders", "pop_eval_loaders / restore_eval_loaders"):
        assert compat.pop_eval_loaders(hf_trainer) is None  # none built yet
        first = hf_trainer.get_eval_dataloader()
        held = compat.pop_eval_loaders(hf_trainer)
        assert held == {"eval": first}
        second = hf_trainer.get_eval_dataloader()
        assert second is not first  # taken out: the Trainer builds a new one
        assert hf_trainer.get_eval_dataloader() is second  # (and caches that)
        compat.restore_eval_loaders(hf_trainer, held)
        assert hf_trainer.get_eval_dataloader() is first


def test_set_train_batch_size_is_the_training_loaders_batch(hf_trainer: Any) -> None:
    with relied_on(_transformers(), "Trainer._train_batch_size", "set_train_batch_size"):
        assert len(next(iter(hf_trainer.get_train_dataloader()))["labels"]) == 32  # the arguments' batch
        compat.set_train_batch_size(hf_trainer, 8)
        assert len(next(iter(hf_trainer.get_train_dataloader()))["labels"]) == 8


def test_move_model_to_device_moves_the_model(hf_trainer: Any) -> None:
    model = hf_trainer.model
    with relied_on(_transformers(), "Trainer._move_model_to_device", "move_model_to_device"):
        compat.move_model_to_device(hf_trainer, model, torch.device("meta"))
        assert {p.device.type for p in model.parameters()} == {"meta"}


# ---------------------------------------------------------------- Lightning


def test_logged_metrics_say_how_each_value_was_logged() -> None:
    L = pytest.importorskip("lightning")
    import torch.nn.functional as F

    class Logs(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(2, 2)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = F.cross_entropy(self.net(batch[0]), batch[1])
            self.log("step_only", loss, on_step=True, on_epoch=False)
            self.log("both", loss, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", F.cross_entropy(self.net(batch[0]), batch[1]))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    seen: list[list[compat.Logged]] = []

    class AtEpochEnd(L.Callback):  # where the adapter reads them (lightning.py: on_train_epoch_end)
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            seen.append(compat.logged_metrics(trainer))

    data = TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,)))
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[AtEpochEnd()])
    trainer.fit(Logs(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    with relied_on(f"Lightning {L.__version__}", "_TrainingEpochLoop._results / _EvaluationLoop._results "
                   "(_ResultMetric.meta)", "logged_metrics"):
        assert len(seen) == 1
        assert set(seen[0]) == {compat.Logged("step_only", True, False), compat.Logged("both", True, True),
                                compat.Logged("val_loss", False, True)}
    assert compat.logged_metrics(object()) == []  # nothing readable: nothing known


# ---------------------------------------------------------------- the versions tested


@pytest.mark.parametrize("framework", sorted(compat.TESTED))
def test_the_installed_release_is_one_the_fence_was_tested_on(framework: str) -> None:
    module = pytest.importorskip(framework)
    minor = ".".join(module.__version__.split(".")[:2])
    assert minor in compat.TESTED[framework], (
        f"{framework} {module.__version__} is not among the releases autotune/integrations/framework_compat.py was "
        f"tested on ({', '.join(compat.TESTED[framework])}): run this module on it, adapt what fails, then add "
        f"{minor} to TESTED")


@pytest.mark.parametrize("framework", sorted(compat.TESTED))
def test_pyprojects_lowest_release_is_a_tested_one(framework: str) -> None:
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    reqs = [Requirement(r) for group in extras.values() for r in group if Requirement(r).name == framework]
    assert reqs, f"pyproject.toml's extras do not name {framework}"
    for req in reqs:
        lows = [s.version for s in req.specifier if s.operator == ">="]
        assert lows and ".".join(lows[0].split(".")[:2]) in compat.TESTED[framework], f"{req}: {compat.TESTED}"


# ---------------------------------------------------------------- the guard

FRAMEWORKS = {"transformers", "accelerate", "lightning", "pytorch_lightning", "lightning_fabric"}
OWN = {"self", "cls"}
BY_NAME = {"getattr", "hasattr", "setattr", "delattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _framework_module(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in FRAMEWORKS


def imports_a_framework(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Import) and any(_framework_module(a.name) for a in n.names)
               or isinstance(n, ast.ImportFrom) and n.level == 0 and _framework_module(n.module)
               for n in ast.walk(tree))


def _private_string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and _private(node.value)


def private_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a module names a private attribute of something not its own: `x._name` (x not self or cls), a
    private name read by string (`getattr(x, "_name")`, `x.__dict__.pop("_name")`), a framework's private module
    or name imported."""
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and _private(n.attr) and ast.unparse(n.value) not in OWN:
            found.append((n.lineno, f"{ast.unparse(n.value)}.{n.attr}"))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in BY_NAME \
                and len(n.args) > 1 and _private_string(n.args[1]):
            found.append((n.lineno, ast.unparse(n)))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args and _private_string(n.args[0]) \
                and isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "__dict__":
            found.append((n.lineno, ast.unparse(n)))
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and _framework_module(n.module) and (
                any(_private(p) for p in (n.module or "").split(".")) or any(_private(a.name) for a in n.names)):
            found.append((n.lineno, f"from {n.module} import {', '.join(a.name for a in n.names)}"))
    return sorted(found)


def test_no_other_module_names_a_frameworks_private_attribute() -> None:
    """A module of autotune that imports a framework reaches its private names only through the fence."""
    offenders, scanned = [], []
    for path in sorted((ROOT / "autotune").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if path == FENCE or not imports_a_framework(tree):
            continue
        scanned.append(path.relative_to(ROOT).as_posix())
        offenders += [f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in private_names(tree)]
    assert {"autotune/integrations/hf.py", "autotune/integrations/lightning.py"} <= set(scanned)
    assert offenders == [], "use (or add) a function of autotune/integrations/framework_compat.py:\n" + \
        "\n".join(offenders)


def test_the_guard_sees_each_way_of_naming_a_private_attribute() -> None:
    tree = ast.parse("import lightning as L\nfrom transformers.trainer import _helper\n"
                     "def f(trainer, loader):\n    self._mine = trainer._train_batch_size\n"
                     "    getattr(loader, '_iterator', None)\n    trainer.__dict__.pop('_eval_dataloaders', None)\n"
                     "    getattr(loader, 'public')\n")
    assert imports_a_framework(tree)
    assert [line for line, _ in private_names(tree)] == [2, 4, 5, 6]
    fence = ast.parse(FENCE.read_text(encoding="utf-8"))
    assert len(private_names(fence)) >= 6  # the fence's own uses are the ones the guard would catch elsewhere
