"""The floors: each package imports only packages on floors below it, so no import points up and no cycle closes.

kforge (the app) -> pipeline (the agent loop) -> judging, prompts -> evaluator -> db, reference_problems.
Every import counts, function-level and TYPE_CHECKING ones included: they are dependencies too."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

FLOORS = {"kforge": 5, "pipeline": 4, "judging": 3, "prompts": 3, "evaluator": 2, "db": 1, "reference_problems": 1}


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
