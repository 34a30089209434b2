"""Find and validate problem files by static analysis: the parent process never executes problem or candidate code.
The user's problem dir is a parameter (None: ~/.kforge/problems): the registry reads no environment, the app hands
in KFORGE_PROBLEMS_DIR."""

from __future__ import annotations

import ast
import difflib
import hashlib
import re
import shutil
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from reference_problems import sizes

PROBLEM_DIR = Path(__file__).resolve().parent
REQUIRED = ("Model", "get_inputs", "get_init_inputs")
LEVEL_DIR = re.compile(r"level(\d+)")  # KernelBench's layout: level1/NN_name.py
_CODE = {"registry.py", "sizes.py"}  # this package's own modules, not problems


class ProblemError(ValueError):
    """A problem that does not exist or is not in KernelBench format."""


class ProblemMeta(BaseModel):
    """What a problem file declares in KFORGE_META; KernelBench files without it get defaults."""

    name: str
    level: int = 1
    atol: float = Field(1e-4, gt=0)
    rtol: float = Field(1e-4, ge=0)
    small: dict[str, int | float | list[int | float]] = Field(
        default_factory=dict, description="module globals overridden for the small (CPU-test) size"
    )
    description: str = ""
    # what the full size must move and compute at least (speed of light); derived when absent
    bytes_moved: int | None = Field(None, gt=0)
    flops: int | None = Field(None, gt=0)


class Problem(BaseModel):
    """A resolved problem: its metadata, file and content hash."""

    meta: ProblemMeta
    path: Path
    sha256: str
    small_derived: bool = False  # the file declares no small size: meta.small was derived from its shapes (sizes.py)
    no_small: str = ""  # the file declares no small size, and why none could be derived

    @property
    def name(self) -> str:
        return self.meta.name

    def source(self) -> str:
        return self.path.read_text()

    def overrides(self, size: str) -> dict:
        """The module globals that resize the problem to `size` (none at its own, full size). A problem with no
        small size is refused, never run at full size under the name small."""
        if size != "small":
            return {}
        if self.no_small:
            raise ProblemError(f"problem '{self.name}' declares no small size and none can be derived from its shapes "
                               f"({self.no_small}): give its KFORGE_META a \"small\" entry, or use --size full")
        return self.meta.small

    def size_label(self, size: str) -> str:
        """The size that runs, as a verdict names it: `full`, `small`, or `small (derived)`, with the constants set."""
        if size != "small":
            return size
        label = "small (derived)" if self.small_derived else "small"
        shapes = ", ".join(f"{k}={v}" for k, v in self.meta.small.items())
        return f"{label}: {shapes or 'its own size fits'}" if self.small_derived or shapes else label


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


def _folder_level(path: Path) -> int:
    """KernelBench files carry no metadata: their level is the levelN folder they sit in."""
    match = LEVEL_DIR.fullmatch(path.parent.name)
    return int(match.group(1)) if match else 1


def user_problem_dir(user_dir: Path | None = None) -> Path:
    """Where `kforge problems import` puts problem files: user_dir, else ~/.kforge/problems."""
    return Path(user_dir) if user_dir else Path.home() / ".kforge" / "problems"


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
        meta = ProblemMeta(**({"name": path.stem, "level": _folder_level(path)} | (_meta_literal(tree) or {})))
    except (ValidationError, ValueError) as exc:
        raise ProblemError(f"bad KFORGE_META in {path.name}: {exc}") from None
    sized = {} if meta.small else _derived_small(tree)
    return Problem(meta=meta.model_copy(update={"small": sized.get("small", meta.small)}), path=path,
                   sha256=hashlib.sha256(raw).hexdigest(), **{k: v for k, v in sized.items() if k != "small"})


def _derived_small(tree: ast.Module) -> dict:
    """A small size for a file that declares none (KernelBench's): derived from its shapes, or why it cannot be."""
    small, why = sizes.derive_small(tree)
    return {"no_small": why} if why else {"small": small, "small_derived": True}


def _level_files(root: Path) -> list[Path]:
    """The .py files of every levelN/ folder under root (root itself may be one)."""
    return sorted(p for p in root.rglob("*.py") if LEVEL_DIR.fullmatch(p.parent.name))


def list_problems(user_dir: Path | None = None) -> list[Problem]:
    """Every problem in reference_problems/ and the user problem dir, sorted by level then name."""
    files = [p for p in PROBLEM_DIR.glob("*.py") if not p.name.startswith("_") and p.name not in _CODE]
    user = user_problem_dir(user_dir)
    files += _level_files(user) if user.is_dir() else []
    return sorted((load_problem_file(p) for p in files), key=lambda p: (p.meta.level, _natural(p.name)))


def _natural(name: str) -> tuple:
    """KernelBench's numbered names in their numbers' order: 2_ before 10_ before 100_."""
    return tuple(int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name))


def _suggestions(name: str, names: list[str], most: int = 5) -> list[str]:
    """The names a typo most likely meant: those containing it (any case), then the closest spellings."""
    typed = name.lower()
    containing = [n for n in names if typed in n.lower()]
    close = difflib.get_close_matches(typed, [n.lower() for n in names], n=most, cutoff=0.6)
    by_lower = {n.lower(): n for n in names}
    return list(dict.fromkeys(containing + [by_lower[c] for c in close]))[:most]


def import_problems(root: Path, user_dir: Path | None = None) -> tuple[list[Problem], list[tuple[Path, str]]]:
    """Copies KernelBench files (root/.../levelN/*.py) into the user problem dir, keeping levelN/ so that
    level and name survive; returns (imported, [(skipped file, why)]). Re-importing a file is a no-op."""
    hint = "name a KernelBench checkout or one of its levelN folders"
    if not Path(root).is_dir():
        raise ProblemError(f"{root}: {'is a file, not a folder' if Path(root).exists() else 'no such folder'} ({hint})")
    found = _level_files(Path(root).resolve())
    if not found:
        raise ProblemError(f"{root}: no levelN/*.py file under it ({hint})")
    dest = user_problem_dir(user_dir).resolve()
    taken = {p.name: p.path for p in list_problems(user_dir)}
    imported, skipped = [], []
    for path in found:
        target = dest / path.parent.name / path.name
        try:
            problem = load_problem_file(path)
        except ProblemError as exc:
            skipped.append((path, str(exc)))
            continue
        if taken.get(problem.name, target) != target:
            skipped.append((path, f"name '{problem.name}' is taken by {taken[problem.name]}"))
            continue
        if path != target:  # importing the user dir itself changes nothing
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        taken[problem.name] = target
        imported.append(load_problem_file(target))
    return imported, skipped


def names_a_file(name_or_path: str) -> bool:
    """Whether a problem is given as a file's path (a .py name, or any path) rather than a registered name."""
    return name_or_path.endswith(".py") or "/" in name_or_path


def resolve_problem(name_or_path: str, user_dir: Path | None = None) -> Problem:
    """A registered name, or a path to any KernelBench-format .py file. A file whose name a registered problem of
    other content holds is named `NAME@SHA8` (its content's first hash digits): its verdicts and board rows are
    its own, never the registered problem's."""
    if names_a_file(name_or_path):
        found = load_problem_file(Path(name_or_path))
        taken = next((p for p in list_problems(user_dir) if p.name == found.name and p.sha256 != found.sha256), None)
        if taken is None:
            return found
        return found.model_copy(update={"meta": found.meta.model_copy(update={"name": f"{found.name}@{found.sha256[:8]}"})})
    problems = list_problems(user_dir)
    for problem in problems:
        if problem.name == name_or_path:
            return problem
    names = [p.name for p in problems]
    meant = _suggestions(name_or_path, names)
    hint = f"; did you mean {', '.join(meant)}?" if meant else ""
    raise ProblemError(f"unknown problem '{name_or_path}'{hint} (`kforge problems` lists all {len(names)})")
