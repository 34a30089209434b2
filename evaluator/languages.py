"""Which kernel language a candidate is written in, read from its source without running it: the evaluator needs it
before any child starts, to pick how kernels are built, watched and judged (a load_inline extension, Triton, ...).

A language counts only where the file makes a kernel in it: a call of torch's cpp_extension `load_inline`/`load`,
or a function under a kernel decorator of Triton, the CuTe DSL or TileLang. Imports are followed through their
aliases (`import triton.language as tl`, `from cutlass import cute`), so `@cute.jit` is told from another `jit`.
"""

from __future__ import annotations

import ast
from enum import StrEnum

from evaluator.parsing import parse


class Language(StrEnum):
    CUDA = "cuda"  # load_inline/load with CUDA sources
    CPP = "cpp"  # load_inline/load with C++ sources only
    TRITON = "triton"
    CUTE = "cute"  # the CuTe DSL of CUTLASS (cutlass.cute)
    TILELANG = "tilelang"


# where a language's kernel decorators live -> the language, the decorators' own names (at any depth below it:
# triton.jit is triton.runtime.jit.jit, T.prim_func is tilelang.language.prim_func)
_DECORATORS = {
    "triton.": (Language.TRITON, {"jit", "autotune", "heuristics"}),
    "cutlass.cute.": (Language.CUTE, {"kernel", "jit"}),
    "tilelang.": (Language.TILELANG, {"jit", "prim_func"}),
}
_EXTENSION = "torch.utils.cpp_extension."
_EMPTY = (None, "", (), [])


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Each name an import binds -> the dotted name it stands for."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname, a.name) if a.asname else (a.name.split(".")[0],) * 2 for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update((a.asname or a.name, f"{node.module}.{a.name}") for a in node.names)
    return names


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str:
    """`a.b.c`, or a call of it (`@triton.autotune(...)`), with its head resolved through the imports."""
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([aliases.get(node.id, node.id), *reversed(parts)])


def _decorated(node: ast.FunctionDef | ast.AsyncFunctionDef, aliases: dict[str, str]) -> Language | None:
    for decorator in node.decorator_list:
        name = _dotted(decorator, aliases)
        for package, (language, decorators) in _DECORATORS.items():
            if name.startswith(package) and name.rsplit(".", 1)[-1] in decorators:
                return language
    return None


def _has_cuda(call: ast.Call, inline: bool) -> bool:
    """CUDA sources given to load_inline (its third argument), or a .cu file among load's sources; a variable counts
    as given: only a literal None or empty value is none."""
    if not inline:
        return any(isinstance(n, ast.Constant) and str(n.value).endswith((".cu", ".cuh")) for n in ast.walk(call))
    given = [k.value for k in call.keywords if k.arg == "cuda_sources"] + call.args[2:3]
    return any(not (isinstance(v, ast.Constant) and v.value in _EMPTY)
               and not (isinstance(v, (ast.List, ast.Tuple)) and not v.elts) for v in given)


def _extension(call: ast.Call, aliases: dict[str, str]) -> Language | None:
    name = _dotted(call, aliases)
    if name in (_EXTENSION + "load_inline", _EXTENSION + "load"):
        return Language.CUDA if _has_cuda(call, inline=name.endswith("load_inline")) else Language.CPP
    return None


def found(source: str) -> list[Language]:
    """Every language the file makes a kernel in, in the order of their first kernel; [] when none (or the source
    does not parse: the static check reports that)."""
    try:
        tree = parse(source)
    except SyntaxError:
        return []
    aliases, seen = _aliases(tree), []
    for node in sorted(ast.walk(tree), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            language = _decorated(node, aliases)
        elif isinstance(node, ast.Call):
            language = _extension(node, aliases)
        else:
            continue
        if language is not None:
            seen.append(language)
    if Language.CUDA in seen:  # one build with CUDA sources makes the candidate a CUDA one
        seen = [Language.CUDA if language is Language.CPP else language for language in seen]
    return list(dict.fromkeys(seen))


def language_of(source: str, backend: str | None = None) -> Language | None:
    """The language a candidate is judged as: `backend` when given (a --backend value), else the first found in
    its source. An unknown backend raises ValueError naming the known ones."""
    if backend is None:
        languages = found(source)
        return languages[0] if languages else None
    try:
        return Language(backend.strip().lower())
    except ValueError:
        raise ValueError(f"unknown backend '{backend}': one of {', '.join(Language)}") from None
