"""notebooks/quickstart.ipynb runs top to bottom without an error, and is stored without outputs."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def test_notebook_is_stored_without_outputs() -> None:
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)


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
