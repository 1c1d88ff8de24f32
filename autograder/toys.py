"""The tiny models exercises drive, under the name the notebooks import them by.

They live in :mod:`harness.toys`, beside the learner's code, because both sides build them.
"""
from harness.toys import NEVER, Recomputed, ToyGPT, ToyTranslator, generator  # noqa: F401
