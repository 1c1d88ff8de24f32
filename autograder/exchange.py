"""What nbgrader's exchange needs from grading, so that feedback reaches the learners.

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
from pathlib import Path

from nbconvert.exporters import Exporter


def write_exchange_files(folder: Path, timestamp: str | None, secret: str | None) -> None:
    """``timestamp.txt`` and ``submission_secret.txt`` as the learner's `nbgrader submit` wrote them
    (release_feedback hashes the secret byte for byte, so it is copied unchanged)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in (("timestamp.txt", timestamp), ("submission_secret.txt", secret)):
        path = folder / name
        if content is None:
            path.unlink(missing_ok=True)  # a stale file would file the feedback under a wrong name
        else:
            path.write_text(content, encoding="utf-8")


@functools.cache
def _gradebook(db_url: str):
    from .gradebook import open_gradebook

    return open_gradebook(db_url)  # once per run of generate_feedback, however many learners


@functools.cache
def _assignment(root: Path, name: str):
    from .assignment import load_assignment

    return load_assignment(root, name)[0]


def course_feedback(root: Path, db_url: str, assignment_name: str, learner: str) -> str:
    """The course's feedback page of one learner, from the gradebook."""
    from .reports import feedback_html

    assignment = _assignment(root, assignment_name)
    records = _gradebook(db_url).records(assignment_name, {learner})
    if not records:
        raise ValueError(
            f"the gradebook {db_url} holds no grading of {learner}'s {assignment_name} by the course's grader: "
            f"grade it with `python -m autograder grade {assignment_name}` (with the same --db). nbgrader's own "
            "feedback page is not made, because it shows the hidden tests' source")
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
