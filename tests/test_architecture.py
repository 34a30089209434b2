"""The floors: each package imports only packages on floors below it, so no import points up and no cycle closes.

kforge (the app) -> pipeline (the agent loop), service (the judging service) -> judging, prompts -> evaluator -> db, reference_problems.
Every import counts, function-level and TYPE_CHECKING ones included: they are dependencies too."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

FLOORS = {"kforge": 5, "pipeline": 4, "service": 4, "judging": 3, "prompts": 3, "evaluator": 2, "db": 1, "reference_problems": 1}


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(FLOORS)


def edges() -> list[tuple[str, str, str]]:
    """(importing package, imported package, file) for every first-party import across packages."""
    return [(package, target, str(path.relative_to(ROOT)))
            for package in FLOORS for path in sorted((ROOT / package).rglob("*.py"))
            for target in _imports(path) if target != package]


def test_every_import_points_down_a_floor():
    up = [f"{file}: {package} (floor {FLOORS[package]}) imports {target} (floor {FLOORS[target]})"
          for package, target, file in edges() if FLOORS[target] >= FLOORS[package]]
    assert not up, "\n".join(up)


def test_the_check_sees_the_imports_it_judges():
    """A check that reads no import cannot fail: the app must be seen importing every floor below it."""
    seen = {(package, target) for package, target, _ in edges()}
    assert {("kforge", "evaluator"), ("kforge", "db"), ("pipeline", "judging"), ("judging", "db"),
            ("evaluator", "reference_problems")} <= seen


# The evaluator's own floors: its folders are the trust boundary (evaluator/__init__.py says what each holds).
EVALUATOR_FLOORS = {"parent": 4, "verdict": 3, "child": 2, "sandbox": 1}  # everything else in evaluator/: floor 0


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _evaluator_imports(path: Path) -> set[str]:
    """The evaluator modules a file imports (`from evaluator import x` names module x where x is one)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("evaluator.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("evaluator"):
            found |= {f"{node.module}.{a.name}" if (ROOT / node.module.replace(".", "/") / f"{a.name}.py").exists()
                      or (ROOT / node.module.replace(".", "/") / a.name).is_dir() else node.module for a in node.names}
    return found - {"evaluator"}


def _evaluator_floor(module: str) -> int:
    parts = module.split(".")
    return EVALUATOR_FLOORS.get(parts[1], 0) if len(parts) > 1 else 0


def evaluator_graph() -> dict[str, set[str]]:
    return {_module(path): _evaluator_imports(path) for path in sorted((ROOT / "evaluator").rglob("*.py"))}


def test_inside_the_evaluator_every_import_points_down_the_trust_boundary():
    """parent -> verdict -> child -> sandbox -> what they share: the child side imports nothing of the verdict or
    the parent, and the sandbox nothing of the child."""
    graph = evaluator_graph()
    up = [f"{module} imports {target}" for module, targets in graph.items() for target in targets
          if _evaluator_floor(target) > _evaluator_floor(module)]
    assert not up, "\n".join(up)
    seen = {(_evaluator_floor(m), _evaluator_floor(t)) for m, ts in graph.items() for t in ts}
    assert {(4, 3), (4, 2), (4, 1), (3, 2), (3, 1), (2, 1), (2, 0), (1, 0)} <= seen  # the check reads real edges


def test_no_evaluator_module_imports_itself_back():
    """No cycle among the evaluator's modules, function-level imports included."""
    graph = evaluator_graph()
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> list[str]:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path + [module, target]
            if target in graph and not state.get(target) and (cycle := visit(target, path + [module])):
                return cycle
        state[module] = 2
        return []
    cycles = [cycle for module in sorted(graph) if not state.get(module) and (cycle := visit(module, []))]
    assert not cycles, " -> ".join(cycles[0])
