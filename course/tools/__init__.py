"""Tools that turn the instructor notebooks into everything generated from them.

solutions/<assignment>/<notebook>.py (jupytext percent) is the one source. From it come
the nbgrader notebooks, the learner release in exercises/ and the importable reference/
package. Nothing generated is edited by hand; `python -m course.tools release` remakes it all
and `python -m course.tools release --check` says whether what is committed is current.

`python -m course.tools new-chapter ch07_topic` starts a chapter with every file it needs, and
`python -m course.tools tables` keeps the chapter tables of README.md and book/intro.md true to
the course. Where each file lives is defined once, in `course.layout`.
"""
