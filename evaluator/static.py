"""Checks that need no execution: is the file a whole Python module with a ModelNew, and does it need CUDA."""

from __future__ import annotations

import ast
import re

from pydantic import BaseModel

from evaluator.contracts import Status
from evaluator.languages import Language, language_of
from evaluator.parsing import parse

# Messages CPython gives when the text stops in the middle of a construct.
_CUT_OFF = re.compile(r"unterminated (triple-quoted )?string|was never closed|unexpected EOF|expected an indented block")
_CODE_LINE = re.compile(r"^\s*(import |from \S+ import |def |class |@\w|\w+\s*=)", re.MULTILINE)
_CUDA_HINTS = re.compile(r"cuda_sources\s*=|\.cuda\(\)|device\s*=\s*['\"]cuda|__global__|<<<")


class StaticCheck(BaseModel):
    """None as status means the source looks like a runnable candidate."""

    status: Status | None = None
    cause: str = ""
    needs_cuda: bool = False  # builds or uses CUDA: cannot run on a CPU-only machine
    cpu_only: bool = False  # builds a C++ extension with no CUDA sources: cannot run on CUDA tensors
    language: Language | None = None  # the kernel language it is judged as (evaluator/languages.py)


def _syntax_cause(source: str, exc: SyntaxError) -> StaticCheck:
    """Cut off: the text stops inside a construct that code before it opened. A file without a line of code is
    prose, not a candidate (invalid: refused as bad input); code that does not parse is a syntax error."""
    where = f"line {exc.lineno} of {source.count(chr(10)) + 1}"
    if not _CODE_LINE.search(source):
        return StaticCheck(status=Status.INVALID, cause=f"no line of Python code (prose?): SyntaxError {exc.msg} ({where})")
    before = "\n".join(source.splitlines()[:exc.lineno or 0])
    if _CUT_OFF.search(exc.msg or "") and _CODE_LINE.search(before):
        return StaticCheck(status=Status.TRUNCATED, cause=f"response cut off: {exc.msg} ({where}); the file ends mid-construct")
    return StaticCheck(status=Status.SYNTAX_ERROR, cause=f"SyntaxError: {exc.msg} ({where})")


def _defines_model_new(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return True
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ModelNew" for t in node.targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == "ModelNew" for a in node.names):
            return True
    return False


def check_source(source: str, backend: str | None = None) -> StaticCheck:
    """Parse without running: truncation, syntax errors and a missing ModelNew cost no compile. `backend` overrides
    the language read from the code (ValueError when unknown). A Triton candidate runs anywhere: compiled on a GPU,
    under Triton's interpreter on CPU; the CuTe DSL and TileLang need a GPU."""
    try:
        tree = parse(source)
    except SyntaxError as exc:
        return _syntax_cause(source, exc)
    if not _defines_model_new(tree):
        return StaticCheck(status=Status.INVALID, cause="no ModelNew defined at module level")
    language = language_of(source, backend)
    if language is Language.TRITON:
        return StaticCheck(language=language)
    if language in (Language.CUTE, Language.TILELANG):
        return StaticCheck(language=language, needs_cuda=True)
    needs_cuda = bool(_CUDA_HINTS.search(source))
    return StaticCheck(needs_cuda=needs_cuda, cpu_only=not needs_cuda and "load_inline" in source, language=language)
