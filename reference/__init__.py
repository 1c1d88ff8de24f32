"""The course's reference implementations, one module per chapter notebook.

Generated from the instructor notebooks in solutions/ by `python -m course.tools release`;
later chapters and the capstone import these instead of keeping copies.
"""
