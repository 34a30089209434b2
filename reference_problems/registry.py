"""Find and validate problem files by static analysis: the parent process never executes problem or candidate code."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

PROBLEM_DIR = Path(__file__).resolve().parent
REQUIRED = ("Model", "get_inputs", "get_init_inputs")


class ProblemError(ValueError):
    """A problem that does not exist or is not in KernelBench format."""


class ProblemMeta(BaseModel):
    """What a problem file declares in KFORGE_META; KernelBench files without it get defaults."""

    name: str
    level: int = 1
    atol: float = Field(1e-4, gt=0)
    rtol: float = Field(1e-4, ge=0)
    small: dict[str, int | float] = Field(
        default_factory=dict, description="module globals overridden for the small (CPU-test) size"
    )
    description: str = ""


class Problem(BaseModel):
    """A resolved problem: its metadata, file and content hash."""

    meta: ProblemMeta
    path: Path
    sha256: str

    @property
    def name(self) -> str:
        return self.meta.name

    def source(self) -> str:
        return self.path.read_text()


def _meta_literal(tree: ast.Module) -> dict | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "KFORGE_META" for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def load_problem_file(path: Path) -> Problem:
    """Validate a KernelBench-format file and read its metadata, without executing it."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ProblemError(f"problem file not found: {path}")
    raw = path.read_bytes()
    try:
        tree = ast.parse(raw.decode(), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise ProblemError(f"problem file is not valid Python: {path}: {exc}") from None
    missing = [n for n in REQUIRED if n not in _top_level_names(tree)]
    if missing:
        raise ProblemError(f"problem file {path.name} lacks {', '.join(missing)} (KernelBench format needs {', '.join(REQUIRED)})")
    try:
        meta = ProblemMeta(**({"name": path.stem} | (_meta_literal(tree) or {})))
    except (ValidationError, ValueError) as exc:
        raise ProblemError(f"bad KFORGE_META in {path.name}: {exc}") from None
    return Problem(meta=meta, path=path, sha256=hashlib.sha256(raw).hexdigest())


def list_problems() -> list[Problem]:
    """Every problem registered in reference_problems/, sorted by level then name."""
    files = [p for p in PROBLEM_DIR.glob("*.py") if not p.name.startswith("_") and p.name != "registry.py"]
    return sorted((load_problem_file(p) for p in files), key=lambda p: (p.meta.level, p.name))


def resolve_problem(name_or_path: str) -> Problem:
    """A registered name, or a path to any KernelBench-format .py file."""
    if name_or_path.endswith(".py") or "/" in name_or_path:
        return load_problem_file(Path(name_or_path))
    for problem in list_problems():
        if problem.name == name_or_path:
            return problem
    known = ", ".join(p.name for p in list_problems())
    raise ProblemError(f"unknown problem '{name_or_path}' (known: {known})")
