"""The learner's side of grading: everything of the course that runs beside submitted code.

Inside the sandbox this package is the only course code there is: the worker
(:mod:`harness.worker`), the wire it speaks (:mod:`harness.wire`), how a case is built and a
learner's function called (:mod:`harness.calls`), the registry of objects a case names instead of
carrying (:mod:`harness.providers`), the tiny models some exercises drive (:mod:`harness.toys`), what
a call did besides returning (:mod:`harness.observe`) and the kernel filter of each learner process
(:mod:`harness.seccomp`).
None of it judges, holds an expected value, or can compute a graded function: the checks, their
oracles and the course's references live in :mod:`autograder`, which the sandbox does not mount.
"""
