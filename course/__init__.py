"""What the course is made of and how its notebooks are written: the one definition of both.

``course.layout`` says where everything lives (the instructor notebook of an assignment, its
release, its reference module, its checks, its page) and which chapters there are.
``course.notebook_format`` says how a notebook is read: the authoring tags, nbgrader's metadata,
which cells are graded tests and which ``check(...)`` calls they make.

The release generator (``course.tools``) and the grader (``autograder``) both read these; neither
reads the other.
"""
