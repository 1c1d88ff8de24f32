"""Tools that turn the instructor notebooks into everything generated from them.

solutions/<assignment>/<notebook>.py (jupytext percent) is the one source. From it come
the nbgrader notebooks, the learner release in exercises/ and the importable reference/
package. Nothing generated is edited by hand; `python -m coursetools release` remakes it all
and `python -m coursetools release --check` says whether what is committed is current.
"""
