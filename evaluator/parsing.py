"""Parsing a candidate's source without running it, shared by the static checks and the language reader."""

from __future__ import annotations

import ast
import threading

_PARSING = threading.Lock()


def parse(source: str) -> ast.Module:
    """ast.parse, one thread at a time: CPython 3.11 keeps the AST builder's recursion depth in state shared by
    threads (gh-106905), so a parse that a finaliser interrupts mid-tree fails another thread's with SystemError.
    The refinement loop extracts answers in worker threads while it judges others."""
    with _PARSING:
        return ast.parse(source)
