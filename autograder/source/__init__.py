"""What the grader learns from a submission's code as text, in its own process, before any of it runs.

:mod:`.shortcuts` judges the source against the rules (what a function may not call, what no
code may reach); :mod:`.references` prepares the course's reference modules for a learner
process, with the function being graded and the helpers it does not use replaced by stubs;
:mod:`.helpers` finds which graded functions a learner's function relies on, to say so when
one of them is the mistake. Nothing here runs learner code: a submission's source is only ever
parsed.
"""
