"""Cross-problem retrieval: a problem's first prompt shows verified fast kernels of similar problems from the db.

Similar means the same operators, read from the reference's code, no embedding model: the torch functions, nn
modules, tensor methods and arithmetic its Model calls (`signature`). Two problems are compared by the weighted
Jaccard index of their operator sets, the operators that hold most of the work (convolutions, GEMMs, attention,
recurrences) weighing 4 and the rest 1: so a fused conv2d + relu + add finds a conv2d kernel rather than a relu
one. Measured on KernelBench: for 100 of its 100 level-2 problems, the nearest level-1 problem shares the heavy
operator (37 of 100 with every operator weighing 1). On equal scores the one
whose inputs have the same ranks (read from get_inputs) comes first. A kernel qualifies when it is its problem's best
correct one on the same device and size and at least `min_speedup` times as fast as PyTorch."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pydantic import BaseModel, Field

from db import Database, LeaderRow
from evaluator.static import parse
from pipeline.features import technique
from prompts import Example
from reference_problems import Problem

# Calls that build or reshape tensors rather than compute: every problem has them, they tell nothing.
PLUMBING = frozenset({
    "parameter", "randn", "rand", "randint", "zeros", "ones", "empty", "tensor", "full", "arange", "super",
    "view", "reshape", "size", "contiguous", "flatten", "unsqueeze", "squeeze", "expand", "to", "cuda", "float",
    "half", "dim", "numel", "clone", "detach", "item", "init", "modulelist", "sequential", "append", "range",
    "len", "int",
})  # spelled as signature() compares them: lower case, underscores dropped (super().__init__ is "init")
ALIASES = {"mm": "matmul", "bmm": "matmul", "addmm": "matmul", "linear": "matmul"}  # one GEMM, four spellings
# The operators that hold most of a problem's work: sharing one says more than sharing any number of epilogues.
HEAVY = re.compile(r"(conv|convtranspose)[123]d|matmul|einsum|lstm|gru|rnn|multiheadattention|scaleddotproductattention")
HEAVY_WEIGHT = 4.0
ARITHMETIC = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "matmul", ast.Pow: "pow"}


class RetrievalConfig(BaseModel):
    k: int = Field(2, ge=1)  # kernels of other problems shown in a problem's first prompt
    min_similarity: float = Field(0.25, ge=0, le=1)  # weighted Jaccard of the operator sets
    min_speedup: float = Field(1.0, ge=0)  # only kernels measured at least this much faster than PyTorch


def _classes(tree: ast.Module) -> list[ast.ClassDef]:
    return [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Model"]


def _call_name(func: ast.expr) -> str | None:
    """torch.nn.functional.relu, F.relu, nn.ReLU, torch.relu and x.relu all name 'relu'; a call of a submodule
    (self.conv(x)) names nothing: its constructor (nn.Conv2d) named it."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        return None
    if isinstance(func, ast.Attribute):
        return func.attr.lower()
    if isinstance(func, ast.Name):
        return func.id.lower()
    return None


def signature(source: str) -> frozenset[str]:
    """The operators the Model class of a reference calls (empty if the file is not Python or has no Model)."""
    try:
        tree = parse(source)
    except SyntaxError:
        return frozenset()
    found = set()
    for node in (n for cls in _classes(tree) for n in ast.walk(cls)):
        if isinstance(node, ast.Call) and (name := _call_name(node.func)):
            name = name.replace("_", "")
            found.add(ALIASES.get(name, name))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in ARITHMETIC:
            found.add(ARITHMETIC[type(node.op)])
    return frozenset(found - PLUMBING)


def input_ranks(source: str) -> tuple[int, ...]:
    """The rank of each tensor get_inputs returns, from its torch.rand*(d0, d1, ...) calls; () where unreadable."""
    try:
        tree = parse(source)
    except SyntaxError:
        return ()
    body = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
    returned = next((n.value for n in ast.walk(body) if isinstance(n, ast.Return)), None) if body else None
    if not isinstance(returned, (ast.List, ast.Tuple)):
        return ()
    named = {t.id: n.value for n in ast.walk(body) if isinstance(n, ast.Assign) for t in n.targets
             if isinstance(t, ast.Name)}
    ranks = []
    for item in (named.get(e.id, e) if isinstance(e, ast.Name) else e for e in returned.elts):
        if isinstance(item, ast.Call) and _call_name(item.func) in {"rand", "randn", "randint", "zeros", "ones"}:
            dims = item.args[0].elts if len(item.args) == 1 and isinstance(item.args[0], ast.Tuple) else item.args
            ranks.append(len(dims))
    return tuple(ranks)


def weight(op: str) -> float:
    return HEAVY_WEIGHT if HEAVY.fullmatch(op) else 1.0


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Weighted Jaccard: the weight the two share over the weight of either."""
    union = sum(map(weight, a | b))
    return sum(map(weight, a & b)) / union if union else 0.0


def _source(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def related(database: Database, problem: Problem, device_name: str, size: str,
            config: RetrievalConfig, precision: str = "fp32") -> list[Example]:
    """The best verified kernels of the problems most like this one (at the same precision), most similar first."""
    best = {row.problem: row for row in database.leaderboard(device_name=device_name, size=size, precision=precision)
            if row.problem != problem.name and row.best_sha256 and (row.best_speedup or 0) >= config.min_speedup}
    sources = {p.name: s for p in database.problems() if p.name in best and (s := _source(p.path)) is not None}
    source = problem.source()
    mine, ranks = signature(source), input_ranks(source)
    signatures = {name: signature(s) for name, s in sources.items()}
    scored = sorted(((similarity(mine, ops), input_ranks(sources[name]) == ranks, name)
                     for name, ops in signatures.items()), reverse=True)
    return [_example(database, best[name], score, signatures[name])
            for score, _, name in scored[:config.k] if score >= config.min_similarity]


def _example(database: Database, row: LeaderRow, score: float, operators: frozenset[str]) -> Example:
    source = database.get_solution(row.best_sha256).source
    return Example(problem=row.problem, operators=sorted(operators), similarity=score, source=source,
                   speedup=row.best_speedup, median_ms=row.candidate_ms, technique=technique(source))
