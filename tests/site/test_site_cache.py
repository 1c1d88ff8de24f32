"""A page of the website follows the code it runs, and a build with nothing changed executes nothing.

A one-page Sphinx project with the site's extension (course.tools.sphinx_site) and myst-nb's
execution cache: the page imports a module from a folder named in `course_execution_inputs`.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PAGE = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  name: python3
  display_name: Python 3
---

# A page

```{code-cell} ipython3
from pkg.value import VALUE
print(f"value={VALUE}")
```
"""

CONF = """\
extensions = ["myst_nb", "course.tools.sphinx_site"]
nb_execution_mode = "cache"
nb_execution_raise_on_error = True
course_execution_inputs = ["pkg"]
mathjax_path = "mathjax/tex-chtml.js"
exclude_patterns = ["_build", "pkg"]
"""


def _build(src: Path) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", str(src), str(src / "_build" / "html")],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, (src / "_build" / "html" / "index.html").read_text(encoding="utf-8")


def test_a_page_runs_again_when_the_code_it_imports_changes_and_only_then(tmp_path):
    (tmp_path / "conf.py").write_text(CONF)
    (tmp_path / "index.md").write_text(PAGE)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "value.py").write_text("VALUE = 1\n")

    log, html = _build(tmp_path)
    assert "Executed notebook" in log and "value=1" in html

    log, html = _build(tmp_path)
    assert "Executed notebook" not in log, "a build with nothing changed executed the page again"
    assert "value=1" in html

    (tmp_path / "pkg" / "value.py").write_text("VALUE = 2\n")
    log, html = _build(tmp_path)
    assert "Executed notebook" in log, "the imported code changed and the page was not executed again"
    assert "value=2" in html, "the page still shows what the old code printed"

    log, _ = _build(tmp_path)
    assert "Executed notebook" not in log
