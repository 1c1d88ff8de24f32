"""Parsing source in the grader's process, where several grading threads parse at once.

CPython 3.11 keeps the depth counter of its syntax-tree constructor in state that every thread
shares, and a parse that fails part-way does not restore it; two threads parsing together can
then fail with ``SystemError: AST constructor recursion depth mismatch`` (CPython gh-106905). A
class graded with ``--jobs 4`` lost a whole submission to it. One lock makes each parse whole.
"""
from __future__ import annotations

import ast
import symtable
import threading

_PARSING = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _PARSING:
        return ast.parse(source, filename)


def symbol_table(source: str, filename: str = "<cell>") -> symtable.SymbolTable:
    with _PARSING:
        return symtable.symtable(source, filename, "exec")
