"""What formgrader shows the instructor of a submission: the autograded/ copy, rendered by
nbgrader's own formgrade exporter and opened in headless Chromium.

The copy carries the learner's code (formgrader shows it as highlighted text) and the grader's
verdicts, never anything of the learner's that a page would render: markdown, HTML, JavaScript,
saved outputs, attachments, or cell and notebook metadata written into the page. Every payload
below would run in the instructor's browser, in formgrader's origin, if it reached the page.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat

from autograder.assignment import Assignment
from autograder.engine import Result
from autograder.engine import TestOutcome as Outcome
from autograder.outputs.autograded import autograded_notebook
from course.notebook_format import complete
from tests.browser import NEEDS_BROWSER, headless_chromium
from tests.conftest import chapter_of

pytestmark = NEEDS_BROWSER

NOTEBOOK = "attention"
#: an answer the instructor grades by hand, written in markdown: formgrader must show it, as text
BY_HAND = {"grade": True, "solution": True, "locked": False, "schema_version": 3, "task": False, "points": 1,
           "grade_id": "explain_scaling"}


def _mark(name: str) -> str:
    """JavaScript that leaves a trace the test looks for: an element, and the page's title."""
    return (f"document.body.appendChild(Object.assign(document.createElement('div'), {{id: 'ran-{name}'}}));"
            f"document.title = 'ran {name}';")


def _with_an_answer_by_hand(source) -> nbformat.NotebookNode:
    nb = nbformat.from_dict(source)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("Why divide by sqrt(d_k)?", metadata={"nbgrader": BY_HAND}))
    return nb


def _submission(source) -> nbformat.NotebookNode:
    """A solved notebook with every way to put script in a page that nbgrader 0.9.6 renders."""
    nb = complete(nbformat.read(chapter_of(NOTEBOOK).release, as_version=4), source)
    by_hand = nbformat.v4.new_markdown_cell(f"So that the scores stay small <script>{_mark('by-hand')}</script>",
                                            metadata={"nbgrader": dict(BY_HAND)})
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "softmax")
    answer.outputs = [
        nbformat.v4.new_output("display_data", data={"text/html": f"<script>{_mark('html-output')}</script>"}),
        nbformat.v4.new_output("display_data", data={"application/javascript": _mark("js-output")}),
        nbformat.v4.new_output("execute_result", data={"text/html": f"<img src=x onerror=\"{_mark('img-output')}\">"},
                               execution_count=1),
    ]
    # A cell of the learner's own that claims to be graded by hand: formgrade writes its grade id into an attribute.
    mine = nbformat.v4.new_code_cell("helper = 1", metadata={"nbgrader": {
        "grade": True, "solution": True, "locked": False, "schema_version": 3, "task": False, "points": 1,
        "grade_id": f"x\"><img src=x onerror=\"{_mark('grade-id')}\">"}})
    nb.cells[1:1] = [
        nbformat.v4.new_markdown_cell(f"<img src=x onerror=\"{_mark('img-markdown')}\">\n\n<script>{_mark('markdown')}</script>"),
        nbformat.v4.new_raw_cell(f"<script>{_mark('raw')}</script>", metadata={"raw_mimetype": "text/html"}),
        mine,
        by_hand,
    ]
    # A locked markdown cell of the instructor's, rewritten: its grade id must not carry the learner's text.
    given = next(c for c in nb.cells if c.cell_type == "markdown" and "nbgrader" in c.metadata)
    given.source += f"\n\n<script>{_mark('given-markdown')}</script>"
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "version_major": 2, "version_minor": 0, "state": {"x": f"</script><script>{_mark('widgets')}</script>"}}}
    return nb


def _formgrade_page(nb_path: Path, out: Path) -> Path:
    """The page formgrader's SubmissionHandler serves for the notebook, made the way it makes it, with
    formgrader's own scripts (jQuery first, which an application/javascript output needs)."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config

    config = Config()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {"assignment_id": "ch02_attention", "notebook_id": NOTEBOOK, "submission_id": "s1", "index": 0,
                 "total": 1, "student": "learner", "last_name": None, "first_name": None,
                 "notebook_path": "autograded/learner/ch02_attention/attention.ipynb",
                 "base_url": Path(handlers.static_path).parent.parent.as_uri()}
    html, _ = HTMLExporter(config=config).from_filename(str(nb_path), resources=resources)
    out.write_text(html, encoding="utf-8")
    return out


def test_formgrader_runs_none_of_the_learner_s_script(source_nb, tmp_path):
    source = source_nb(NOTEBOOK)
    assignment = Assignment.from_notebook("ch02_attention", NOTEBOOK, source)
    submitted = tmp_path / "submitted.ipynb"
    nbformat.write(_submission(source), submitted)
    result = Result("learner", assignment.name, NOTEBOOK, path=submitted, outcomes=[
        Outcome(t.grade_id, t.points, t.points, True) for t in assignment.tests])
    copy = tmp_path / "autograded.ipynb"
    autograded = autograded_notebook(result, _with_an_answer_by_hand(source))
    assert {o.output_type for c in autograded.cells for o in c.get("outputs", [])} == {"stream"}  # the grader's
    nbformat.write(autograded, copy)
    page = _formgrade_page(copy, tmp_path / "page.html")

    driver = headless_chromium()
    try:
        driver.get(page.as_uri())
        ran = driver.execute_script(
            "return [document.title, typeof submission_id + ' ' + typeof jQuery, "
            "Array.from(document.querySelectorAll('[id^=ran-]'), e => e.id), document.body.innerText]")
    finally:
        driver.quit()
    title, page_script, traces, text = ran
    assert page_script == "string function"  # formgrader's own scripts ran: the browser runs scripts
    assert (title, traces) == (NOTEBOOK, []), json.dumps(traces)
    # What formgrader is for is still there: the learner's code and the grader's verdicts.
    assert "def softmax(" in text and "passed" in text
    assert "Student's answer" in text and "test_softmax" in text
    assert "So that the scores stay small <script>" in text  # the answer to grade by hand, as text
