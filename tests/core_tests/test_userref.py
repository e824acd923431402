"""userref.py: a user's module is imported with its folder on sys.path for the import only; processes started to
run it (DDP ranks) still import it by name."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import sys
from pathlib import Path

import pytest

from autotune.core import userref

MODULE = '''
def fit(ctx):
    return "fit ran"


def where():
    import sys
    return sys.modules[__name__].__file__
'''


def _unpickle_and_call(blob: bytes, conn: object) -> None:
    conn.send(pickle.loads(blob)())  # type: ignore[attr-defined]


def test_the_users_folder_is_on_sys_path_only_for_the_import(tmp_path: Path) -> None:
    (tmp_path / "sidefx_user_fit.py").write_text(MODULE)
    before = list(sys.path)
    try:
        fn = userref.load_factory("sidefx_user_fit:fit", near=str(tmp_path / "run.yaml"))
        assert fn(None) == "fit ran"
        assert sys.path == before
        assert "sidefx_user_fit" in sys.modules  # what unpickling in this process needs
        folder = str(tmp_path.resolve())
        with userref.importable():
            assert folder in sys.path
        assert sys.path == before
    finally:
        sys.modules.pop("sidefx_user_fit", None)
        sys.path[:] = before


def test_a_spawned_process_imports_the_users_module_by_name(tmp_path: Path) -> None:
    (tmp_path / "sidefx_user_where.py").write_text(MODULE)
    before = list(sys.path)
    try:
        where = userref.load_factory("sidefx_user_where:where", near=str(tmp_path / "run.yaml"))
        ctx = mp.get_context("spawn")
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_unpickle_and_call, args=(pickle.dumps(where), send))
        with userref.importable():  # as training/_distributed.launch starts its ranks
            p.start()
        assert sys.path == before
        assert recv.recv() == str(tmp_path.resolve() / "sidefx_user_where.py")
        p.join(timeout=60)
        assert p.exitcode == 0
    finally:
        sys.modules.pop("sidefx_user_where", None)
        sys.path[:] = before


def test_a_users_module_missing_a_framework_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`trainer: digits_lightning:fit` without lightning installed: one line naming autotune[lightning]."""
    (tmp_path / "needs_lightning_fit.py").write_text("import lightning.pytorch as pl\n\ndef fit(ctx):\n    pass\n")
    monkeypatch.setitem(sys.modules, "lightning", None)  # (None in sys.modules: the import fails)
    with pytest.raises(userref.ConfigError) as info:
        userref.load_factory("needs_lightning_fit:fit", "run.yaml", "trainer", near=str(tmp_path / "run.yaml"))
    assert str(info.value) == ("run.yaml: trainer: cannot import 'needs_lightning_fit': it needs lightning, which is "
                               "not installed: pip install 'autotune[lightning]'")


def test_a_new_process_imports_the_users_module_under_the_argv_it_was_imported_with(tmp_path: Path) -> None:
    """`module_argv` is what the user's module saw here (`[its file]`); `as_imported` sets it for the import in a DDP
    rank and restores the process's own after (the rank's main script, run again first, keeps its command line)."""
    (tmp_path / "sidefx_user_argv.py").write_text("import sys\nSEEN = list(sys.argv)\n\ndef fit(ctx):\n    pass\n")
    before, argv = list(sys.path), list(sys.argv)
    try:
        userref.load_factory("sidefx_user_argv:fit", near=str(tmp_path / "run.yaml"))
        mine = str(tmp_path.resolve() / "sidefx_user_argv.py")
        assert sys.modules["sidefx_user_argv"].SEEN == [mine] == userref.module_argv()
        assert sys.argv == argv
        with userref.as_imported(userref.module_argv()):
            assert sys.argv == [mine]
        assert sys.argv == argv
        with userref.as_imported([]):  # nothing imported by load_factory: the process's own
            assert sys.argv == argv
    finally:
        sys.modules.pop("sidefx_user_argv", None)
        sys.path[:] = before
