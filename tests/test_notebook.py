"""notebooks/quickstart.ipynb runs top to bottom without an error, and is stored without outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def test_notebook_is_stored_without_outputs() -> None:
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)


@pytest.mark.slow  # (7-14 s of real processes: the default run stays under 10 minutes)
def test_quickstart_notebook_executes(tmp_path: Path) -> None:
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel runs in tmp_path: the notebook's study and report land there, not in the checkout.
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "recommended: trial" in text and "val_accuracy" in text
    figs = [o for o in outputs if o.output_type in ("execute_result", "display_data")
            and "application/vnd.plotly.v1+json" in o.data]
    assert len(figs) == 1  # the Pareto plot, inline
    traces = figs[0].data["application/vnd.plotly.v1+json"]["data"]
    assert any(t.get("name", "").startswith("recommended") for t in traces)
    assert (tmp_path / "quickstart.db").is_file() and (tmp_path / "quickstart.html").is_file()


# ---------------------------------------------------------------- a guest in a notebook's kernel (issue 43)


@pytest.fixture
def no_sigchld_handler() -> Any:
    """torch's DataLoader leaves a SIGCHLD handler in the process that made workers (another test, here): it would
    raise in this test's process when the kernel it started ends. The kernel's death is not a DataLoader's."""
    import signal

    before = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGCHLD, before)


def _running(db: Path) -> bool:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM trials WHERE state = 'RUNNING'").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def _outputs(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.mark.slow  # (7-14 s of real processes: the default run stays under 10 minutes)
def test_an_interrupt_mid_trial_leaves_the_kernel_alive_and_the_trial_recorded(tmp_path: Path,
                                                                               no_sigchld_handler: None) -> None:
    """quickstart.ipynb's run cell interrupted (Jupyter's interrupt: SIGINT to the kernel) while a trial trains: the
    cell ends with KeyboardInterrupt, the trial is recorded (FAIL, interrupted), and the kernel goes on with every
    variable it had."""
    pytest.importorskip("ipykernel")
    import asyncio
    import time

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}})
    check = nbformat.v4.new_code_cell(
        "import optuna\n"
        "s = optuna.load_study(study_name='quickstart', storage='sqlite:///quickstart.db')\n"
        "print('states', sorted((t.state.name, t.user_attrs.get('stop_reason')) for t in s.trials))\n"
        "print('cfg still here', cfg.study.name)")
    nb.cells.append(check)

    async def session() -> None:
        async with client.async_setup_kernel():
            await client.async_execute_cell(nb.cells[2], 2)  # load the config
            run = asyncio.create_task(client.async_execute_cell(nb.cells[4], 4))
            deadline = time.monotonic() + 300
            while not _running(tmp_path / "quickstart.db"):
                assert time.monotonic() < deadline and not run.done(), nb.cells[4].outputs
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)  # inside the trial's training
            await client.km.interrupt_kernel()
            await asyncio.wait_for(run, 120)
            await client.async_execute_cell(check, len(nb.cells) - 1)
            assert await client.km.is_alive()

    asyncio.run(session())
    errors = [o for o in nb.cells[4].outputs if o.output_type == "error"]
    assert [e.ename for e in errors] == ["KeyboardInterrupt"], nb.cells[4].outputs
    text = _outputs(check)
    assert "cfg still here quickstart" in text, check.outputs
    states = text.split("states ", 1)[1].splitlines()[0]
    assert "('FAIL', 'interrupted')" in states and "RUNNING" not in states, states


@pytest.mark.slow
def test_a_fit_that_swallows_the_interrupt_does_not_kill_the_kernel(tmp_path: Path, no_sigchld_handler: None) -> None:
    """hang_seconds passes while the fit skips batches with a bare `except:`: today the watchdog's last resort
    os._exit-ed the kernel (every variable lost); now the trial is recorded, the run stops, the kernel lives."""
    pytest.importorskip("ipykernel")
    root = Path(__file__).resolve().parents[1]
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {str(root)!r})\n"
                                  "import torch._dynamo, autotune\n"
                                  "from autotune.core import watchdog\n"
                                  "watchdog.GRACE_S = 1.0\n"
                                  "kept = 'my variables'"),
        nbformat.v4.new_code_cell(
            "cfg = autotune.load_config('g.yaml')\n"
            "try:\n    autotune.run(cfg)\n"
            "except autotune.AutotuneError as e:\n    print('run stopped:', type(e).__name__)"),
        nbformat.v4.new_code_cell("print('kernel alive with', kept)"),
    ])
    (tmp_path / "g.yaml").write_text("study: {name: g, storage: 'sqlite:///g.db', n_trials: 2}\n"
                                     "trainer: tests.guest_fits:fit_swallows_everything\n"
                                     "train: {epochs: 2, batch_size: 64}\npruning: {slow: {hang_seconds: 1}}\n")
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert "run stopped: StuckTrial" in _outputs(nb.cells[1]), nb.cells[1].outputs
    assert "kernel alive with my variables" in _outputs(nb.cells[2])
