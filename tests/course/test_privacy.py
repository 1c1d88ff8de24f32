"""The course directory and its instructor-only parts are made the owner's alone (course.privacy)."""
from __future__ import annotations

import os
import stat

from course.layout import COURSE_SECRET, GRADEBOOK, SOLUTIONS, SUBMITTED, ZH_SOLUTIONS
from course.privacy import make_private, open_homes, private_files, said


def test_the_course_directory_and_its_instructor_parts_are_made_the_owners_alone(tmp_path):
    root = tmp_path / "course"
    (root / SOLUTIONS).mkdir(parents=True)
    (root / ZH_SOLUTIONS).mkdir(parents=True)  # the Chinese twins hold the same solutions
    (root / SUBMITTED).mkdir()
    (root / GRADEBOOK).write_text("")
    (root / COURSE_SECRET).write_text("ab" * 32)
    (root / "README.md").write_text("")
    (root / "elsewhere").mkdir()
    (root / "feedback").symlink_to(root / "elsewhere")  # a link's own mode means nothing: left as it is
    for path in (root, root / SOLUTIONS, root / ZH_SOLUTIONS, root / SUBMITTED, root / GRADEBOOK, root / COURSE_SECRET,
                 root / "elsewhere"):
        path.chmod(0o755)
    old = os.umask(0o022)
    try:
        changed = make_private(root)
        with private_files():
            assert os.umask(0o077) == 0o077  # what the process makes meanwhile is private
        assert os.umask(0o022) == 0o022  # and the caller's umask is back after
    finally:
        os.umask(old)
    for path in (root, root / SOLUTIONS, root / ZH_SOLUTIONS, root / SUBMITTED, root / GRADEBOOK, root / COURSE_SECRET):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    assert stat.S_IMODE((root / "elsewhere").stat().st_mode) == 0o755
    assert len(changed) == 6 and f"{root} (mode 755 -> 700)" in said(changed)
    assert make_private(root) == [] and said([]) == ""  # nothing left to change: nothing said


def test_a_learner_who_is_no_user_of_this_machine_is_not_named():
    # learners who are users are checked with real accounts in tests/grader/test_exchange.py
    assert open_homes(["no-such-user-here-4821"]) == []
