"""Every instructor notebook runs top to bottom, its visible and hidden tests passing.

The book's pages are executed by the website build (tests/site/test_site.py).
"""
from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import NOTEBOOKS


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_solution_notebook_runs_clean(notebook, source_nb, tmp_path):
    nb = nbformat.from_dict(source_nb(notebook))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"{notebook}: {output.ename}: {output.evalue}"
            if output.output_type == "stream" and output.name == "stderr":
                pytest.fail(f"{notebook} wrote to stderr (nbgrader scores that as a failure):\n{output.text}")
    printed = "".join(o.text for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert printed.count("✓") == 2 * len(graded), "each test cell passes its visible and its hidden checks"
