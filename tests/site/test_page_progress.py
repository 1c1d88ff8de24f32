"""A page's long cell is reported on the build's terminal while it runs, not in the page
(course/tools/page_progress.py)."""
from __future__ import annotations

import re
import subprocess
import sys

SCRIPT = r'''
import nbformat
from nbclient import NotebookClient
nb = nbformat.v4.new_notebook()
nb.cells = [nbformat.v4.new_code_cell("from course.tools.page_progress import report_progress\nreport_progress(every=1)"),
            nbformat.v4.new_code_cell("import time\ntime.sleep(2.5)  # a long cell"),
            nbformat.v4.new_code_cell("print('quick')")]
NotebookClient(nb, kernel_name="python3", timeout=60).execute()
outputs = [o for cell in nb.cells for o in cell.get("outputs", [])]
print("OUTPUTS", [o.get("text", "") for o in outputs])
'''


def test_a_long_cell_is_reported_to_the_build_and_not_shown_on_the_page():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the cell `import time` is still running, " in done.stderr, done.stderr[-2000:]
    assert re.search(r"the cell `import time` took [23] s", done.stderr), done.stderr[-2000:]
    assert "print" not in done.stderr, "a quick cell is reported"
    assert "OUTPUTS ['quick\\n']" in done.stdout, "the progress reached the page's outputs"
