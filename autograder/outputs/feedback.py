"""Each learner's feedback page, and what nbgrader's exchange needs so that it reaches them.

The page shows the visible tests' diagnostics; for hidden tests only whether they passed and
their points. Everything that came from a submission is escaped before it goes into HTML and shows
its control characters as escapes (``\x1b``). A page is written with its exchange files in one
place, :func:`write_feedback`, whether `grade` or `export` writes it.

`nbgrader release_feedback` files each page under a name computed from the submission's secret
(``notebook_hash(secret, notebook_id)``, the md5 of the two) and reads the submission's
``timestamp.txt`` and ``submission_secret.txt`` from ``feedback/<learner>/<assignment>/``;
`nbgrader fetch_feedback` looks for that name with the secret it kept when the learner
submitted. Grading writes both files there (and into ``autograded/``, where
`nbgrader generate_feedback` copies them from), exactly as `nbgrader submit` wrote them.

`nbgrader generate_feedback` renders the autograded notebook, hidden tests' source included.
``nbgrader_config.py`` gives it :class:`CourseFeedbackExporter` instead, which writes the
course's own page for that learner from the gradebook, the same page `grade` and `export`
write; a learner graded some other way gets an error, never nbgrader's page.
"""
from __future__ import annotations

import functools
import html
from datetime import UTC, datetime
from pathlib import Path

from nbconvert.exporters import Exporter

from course.layout import SUBMISSION_SECRET, TIMESTAMP, feedback_page

from ..assignment import Assignment
from ..engine import Result
from ..messages import N_, current, tr
from ..submissions import safe_name
from .escapes import visible


def write_exchange_files(folder: Path, timestamp: str | None, secret: str | None) -> None:
    """``timestamp.txt`` and ``submission_secret.txt`` as the learner's `nbgrader submit` wrote them
    (release_feedback hashes the secret byte for byte, so it is copied unchanged)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in ((TIMESTAMP, timestamp), (SUBMISSION_SECRET, secret)):
        path = folder / name
        if content is None:
            path.unlink(missing_ok=True)  # a stale file would file the feedback under a wrong name
        else:
            path.write_text(content, encoding="utf-8")


STYLE = """
body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem} table{border-collapse:collapse;width:100%}
td,th{padding:.4rem .6rem;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
.pass{color:#176c2e;font-weight:600} .fail{color:#a4161a;font-weight:600}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.5rem;margin:.3rem 0 0}
.note{background:#fff8e1;padding:.5rem .8rem;border-left:4px solid #f0b429;margin:.5rem 0}
"""


#: all that is said of a test failed on hidden cases only
HIDDEN_ONLY = N_("Your function passes the visible tests but not the hidden ones: check cases the visible tests "
                  "do not try (other shapes, dtypes, masks, extreme values).")


def feedback_html(assignment: Assignment, result: Result, graded_at: datetime | None = None) -> str:
    def e(text: str) -> str:
        # A page saved or read in a terminal must not act on the learner's escapes either.
        return html.escape(visible(text, keep="\n\t"))

    rows = []
    hidden_ids = {t.grade_id for t in assignment.tests if any(h for _, _, h in t.calls)}
    for o in result.outcomes:
        verdict = ('<span class="pass">' + tr("passed") if o.passed else '<span class="fail">' + tr("failed")) + "</span>"
        detail = ""
        if not o.passed and o.message and not o.hidden_failed:  # a hidden case is never described
            detail = f"<pre>{e(o.message)}</pre>"
        elif o.hidden_failed:
            detail = "<pre>" + tr(HIDDEN_ONLY) + "</pre>"
        hidden = tr(" (visible and hidden tests)") if o.grade_id in hidden_ids else ""
        score = f"{o.points:g} / {o.max_points:g}"
        rows.append(f"<tr><td>{e(o.grade_id)}{hidden}</td><td>{verdict}{detail}</td><td>{score}</td></tr>")
    notes = "".join(f'<div class="note">{e(n)}</div>' for n in result.notes)
    if result.flags:  # the learner is told too: the instructor will read this code
        notes += '<div class="note">' + tr("<b>For the instructor to review:</b> {flags}").format(
            flags=e("; ".join(result.flags))) + "</div>"
    error = ('<div class="note">' + tr("<b>Not graded:</b> {error}").format(error=e(result.error)) + "</div>"
             if result.error else "")
    when = (graded_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    language = (current() or "en").replace("_", "-")  # HTML's name of the language: zh-CN
    return (
        f"<!doctype html><html lang='{language}'><head><meta charset='utf-8'>"
        "<title>" + tr("{assignment}: feedback for {learner}").format(assignment=e(assignment.name),
                                                                       learner=e(result.learner)) + "</title>"
        f"<style>{STYLE}</style></head><body>"
        "<h1>" + tr("{assignment} / {notebook}.ipynb: feedback for {learner}").format(
            assignment=e(assignment.name), notebook=e(assignment.notebook), learner=e(result.learner)) + "</h1>"
        "<p>" + tr("Score: <b>{score} / {max_score}</b> (graded {when})").format(
            score=f"{result.score:g}", max_score=f"{assignment.max_score:g}", when=when) + f"</p>{error}{notes}"
        "<table><tr><th>" + tr("test") + "</th><th>" + tr("result") + "</th><th>" + tr("points") + "</th></tr>"
        + "".join(rows) + "</table><p>"
        + tr("Hidden tests are reported as passed or failed only. Each function is graded on its own: where it "
             "calls another graded function of this notebook, the course's version of that function is used, so "
             "one mistake costs its own points only.") + "</p></body></html>"
    )


def write_feedback(root: Path, assignment: Assignment, result: Result, graded_at: datetime | None,
                   timestamp: str | None, secret: str | None) -> Path | None:
    """A learner's page and the files nbgrader's release_feedback reads beside it; None for a learner
    whose id is not a plain name. `grade` and `export` both write a page through here."""
    if not safe_name(result.learner):
        return None
    path = feedback_page(root, result.learner, assignment.name, assignment.notebook)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(feedback_html(assignment, result, graded_at), encoding="utf-8")
    write_exchange_files(path.parent, timestamp, secret)
    return path


@functools.cache
def _gradebook(db_url: str):
    from .gradebook import open_gradebook

    return open_gradebook(db_url)  # once per run of generate_feedback, however many learners


@functools.cache
def _assignment(root: Path, name: str):
    from ..assignment import load_assignment

    return load_assignment(root, name)[0]


def course_feedback(root: Path, db_url: str, assignment_name: str, learner: str) -> str:
    """The course's feedback page of one learner, from the gradebook."""
    assignment = _assignment(root, assignment_name)
    records = _gradebook(db_url).graded(assignment_name, {learner})
    if not records:
        raise ValueError(
            f"the gradebook {db_url} holds no grading of {learner}'s {assignment_name} by the course's grader: "
            f"grade it with `python -m autograder grade {assignment_name}` (with the same --db). nbgrader's own "
            "feedback page is not made, because it shows the hidden tests' source")  # english: the instructor's
    return feedback_html(assignment, records[0].result, records[0].graded_at)


class CourseFeedbackExporter(Exporter):
    """`nbgrader generate_feedback`'s exporter: the course's page, never the notebook rendered."""

    file_extension = ".html"
    output_mimetype = "text/html"

    def from_notebook_node(self, nb, resources=None, **kw):
        resources = self._init_resources(resources)
        info = resources.get("nbgrader", {})
        coursedir = getattr(self.parent, "coursedir", None)
        root = Path(coursedir.root if coursedir is not None else ".").resolve()
        page = course_feedback(root, info["db_url"], info["assignment"], info["student"])
        resources["output_extension"] = self.file_extension
        return page, resources
