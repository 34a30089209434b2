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
    kernel_free: bool = False  # no kernel of its own can run: no kernel language, nothing loaded (_kernel_free)


# What a file may import and still hold no kernel: torch itself (its extension loaders are a kernel language), and
# pure-Python modules. Names that load or make code at run time keep a file from being called kernel-free.
_PLAIN_IMPORTS = frozenset({"torch", "numpy", "math", "typing", "functools", "itertools", "collections",
                            "dataclasses", "operator", "__future__"})
_LOADERS = frozenset({"load", "load_library", "load_inline", "CDLL", "cdll", "PyDLL", "import_module", "__import__",
                      "exec", "eval", "compile", "run_path", "run_module", "jit", "script"})


def _syntax_cause(source: str, exc: SyntaxError) -> StaticCheck:
    """Cut off: the text stops inside a construct that code before it opened. A file without a line of code is
    prose, not a candidate (invalid: refused as bad input); code that does not parse is a syntax error."""
    where = f"line {exc.lineno} of {len(source.splitlines())}"
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


def _kernel_free(tree: ast.Module) -> bool:
    """Whether nothing in the file could run a kernel of its own: it imports only torch and pure-Python modules
    and names no loader (an extension, a shared library, another module by name, code made at run time). Such a
    candidate is the no_custom_kernel cheat before anything runs (its reference need not run first)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] not in _PLAIN_IMPORTS for a in node.names):
            return False
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] not in _PLAIN_IMPORTS):
            return False
        if isinstance(node, ast.Name) and node.id in _LOADERS or isinstance(node, ast.Attribute) and node.attr in _LOADERS:
            return False
    return True


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
    return StaticCheck(needs_cuda=needs_cuda, cpu_only=not needs_cuda and "load_inline" in source, language=language,
                       kernel_free=language is None and _kernel_free(tree))
