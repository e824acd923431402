"""The layering (issue 21): cli → observe → study → speed → integrations → fit → config → search → compress →
training → spec → core.

No module under autotune/ reaches for the root package (it sits above every layer), and import-linter's contract
in pyproject.toml holds, and does catch an upward import.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "autotune"
SUBPACKAGES = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}



def _root_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """`import autotune` and `from autotune import X` (X not a subpackage), anywhere in the module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name == "autotune"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "autotune":
            found += [(node.lineno, f"from autotune import {a.name}") for a in node.names if a.name not in SUBPACKAGES]
    return found


def test_no_module_imports_the_root_package() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent == PACKAGE and path.name in ("__init__.py", "__main__.py"):
            continue
        for line, text in _root_imports(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{path.relative_to(ROOT)}:{line}: {text}")
    assert offenders == []


def test_the_root_import_check_sees_imports_inside_functions() -> None:
    tree = ast.parse("from autotune import compress, config\n\ndef f():\n    from autotune import train\n"
                     "    import autotune\n")
    assert _root_imports(tree) == [(4, "from autotune import train"), (5, "import autotune")]


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on `cwd`'s pyproject.toml, with `cwd`'s autotune first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()",
                           "--no-cache", "--no-logo"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _broken(output: str) -> set[tuple[str, str]]:
    """The direct imports a broken contract names: `- autotune.a._b -> autotune.c._d (l.12)`."""
    return set(re.findall(r"^- (autotune[\w.]*) -> (autotune[\w.]*)", output, flags=re.M))


needs_linter = pytest.mark.skipif(importlib.util.find_spec("importlinter") is None,
                                  reason="import-linter is not installed (pip install -e '.[test]')")


@needs_linter
def test_the_layers_contract_holds() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0 and not _broken(done.stdout), done.stdout


@needs_linter
def test_the_layers_contract_catches_an_upward_import(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE, tmp_path / "autotune", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    core = tmp_path / "autotune" / "core" / "errors.py"
    core.write_text(core.read_text(encoding="utf-8") + "\n\ndef _upward():\n    from autotune.cli import main\n\n"
                    "    return main\n", encoding="utf-8")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "autotune.core is not allowed to import autotune.cli" in done.stdout
    assert ("autotune.core.errors", "autotune.cli") in _broken(done.stdout)


FACES = ("core", "spec", "training", "training.data", "training.distributed", "compress", "search", "config", "fit",
         "integrations", "speed", "study", "observe", "cli")


@pytest.mark.parametrize("package", FACES)
def test_each_package_face_is_plain_imports_and_all(package: str) -> None:
    """A face is a docstring, `from autotune.<package>... import` lines and `__all__`: nothing else runs in it."""
    path = PACKAGE.joinpath(*package.split("."), "__init__.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    mod = importlib.import_module(f"autotune.{package}")
    assert mod.__doc__ and mod.__all__ and len(set(mod.__all__)) == len(mod.__all__)
    for node in tree.body[1:]:
        if isinstance(node, ast.ImportFrom):
            assert node.module == "__future__" or (node.module or "").startswith("autotune."), ast.dump(node)
        else:
            assert isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [
                "__all__"], f"{path.name}:{node.lineno}: a face holds imports and __all__ only"
    for name in mod.__all__:
        assert getattr(mod, name) is not None and (not name.startswith("_") or name == "__version__")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        mod.nope  # noqa: B018


def _package_of(module: str) -> str:
    return module.split(".")[1]


def test_other_packages_import_through_the_faces() -> None:
    """A module of one package imports another package's names from that package (`from autotune.study import
    make_storage`, or one of its modules: `from autotune.study import orphans`), never from inside it, and only
    names the face lists."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if len(parts) < 2:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("autotune."):
                continue
            if _package_of(node.module) == parts[0]:
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if node.module.count(".") != 1:
                offenders.append(f"{where}: from {node.module} (inside another package)")
                continue
            face = importlib.import_module(node.module)
            for a in node.names:
                is_module = importlib.util.find_spec(f"{node.module}.{a.name}") is not None
                if not is_module and a.name not in face.__all__:
                    offenders.append(f"{where}: {a.name} is not in {node.module}.__all__")
    assert offenders == []


def test_inside_training_modules_import_each_other_directly() -> None:
    """training/'s face imports its subpackages: a module of training importing a name through the face it is
    part of would start an import cycle."""
    offenders = []
    for path in sorted((PACKAGE / "training").rglob("*.py")):
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in ("autotune.training", "autotune.training.data",
                                                                     "autotune.training.distributed",
                                                                     "autotune.training.context"):
                for a in node.names:
                    if importlib.util.find_spec(f"{node.module}.{a.name}") is None:
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {a.name}")
    assert offenders == []


def test_the_faces_keep_light_modules_light() -> None:
    """`import autotune` and the packages `autotune validate` needs (core, spec, config) load neither torch nor
    Optuna: a typo in a run file is reported at once."""
    code = ("import sys\nimport autotune, autotune.core, autotune.spec, autotune.config\n"
            "assert 'optuna' not in sys.modules and 'torch' not in sys.modules, 'core/spec/config'\n"
            "from autotune.training import Limits, EpochRecord\n"
            "assert 'torch' in sys.modules and EpochRecord.__module__ == 'autotune.training.context.results'\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _module_imports() -> dict[str, set[str]]:
    """Each module's imports of other autotune modules, anywhere in it (functions and TYPE_CHECKING too); `from
    pkg import submodule` is an edge to the submodule only (the package's __init__ runs for any of its modules)."""
    mods = {}
    for p in PACKAGE.rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, p in mods.items():
        pkg = name if p.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [base, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            edges[name] |= {t for t in targets if t in mods and t != name}
    return edges


def test_no_import_cycle_between_modules() -> None:
    edges = _module_imports()
    assert edges["autotune.cli.app"] >= {"autotune.cli.launch"}  # the graph sees the command registry
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(m):], m]))
        if m in done:
            return
        for n in sorted(edges[m]):
            visit(n, [*path, m])
        done.add(m)

    for m in sorted(edges):
        visit(m, [])


def test_test_modules_share_helpers_through_support_only() -> None:
    """Shared test helpers live in tests/support.py (docs/design.md); conftest.py holds fixtures, and no test module
    imports conftest.py or another test module (imports inside functions and in a child's code string counted)."""
    tests = ROOT / "tests"
    offenders = []
    for path in sorted(tests.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"(?:from|import) (?:tests\.)?(?:\w+_tests\.)?(conftest|test_\w+)\b", text):
            line = text.count("\n", 0, m.start()) + 1
            offenders.append(f"{path.relative_to(ROOT)}:{line}: {m.group(0)}")
    assert offenders == []
