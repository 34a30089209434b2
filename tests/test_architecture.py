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
EVALUATOR_FLOORS = {"parent": 5, "verdict": 4, "child": 3, "build": 2, "sandbox": 1}  # the rest of evaluator/: floor 0
KFORGE_SIDE = ("parent", "verdict")  # the folders whose modules run in kforge's own process


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


def _folder(module: str) -> str:
    """The evaluator folder a module lies in ('' for a top-level one)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _evaluator_floor(module: str) -> int:
    return EVALUATOR_FLOORS.get(_folder(module), 0)


def evaluator_graph() -> dict[str, set[str]]:
    return {_module(path): _evaluator_imports(path) for path in sorted((ROOT / "evaluator").rglob("*.py"))}


def test_inside_the_evaluator_every_import_points_down_the_trust_boundary():
    """parent -> verdict -> child -> build -> sandbox -> what they share: the child side imports nothing of the
    verdict or the parent, the build tools nothing of the child, and the sandbox nothing of either."""
    graph = evaluator_graph()
    up = [f"{module} imports {target}" for module, targets in graph.items() for target in targets
          if _evaluator_floor(target) > _evaluator_floor(module)]
    assert not up, "\n".join(up)
    seen = {(_evaluator_floor(m), _evaluator_floor(t)) for m, ts in graph.items() for t in ts}
    assert {(5, 4), (5, 2), (5, 1), (4, 1), (3, 2), (3, 1), (3, 0), (2, 0), (1, 0)} <= seen  # the check reads real edges


def _into_the_child(graph: dict[str, set[str]]) -> list[str]:
    """The imports of evaluator.child by a module of kforge's own process (parent/, verdict/)."""
    return [f"{module} imports {target}" for module, targets in sorted(graph.items()) for target in sorted(targets)
            if _folder(module) in KFORGE_SIDE and _folder(target) == "child"]


def test_kforge_s_own_process_imports_nothing_of_the_child():
    """The folders match the processes: parent/ and verdict/ run in kforge, child/ beside candidate code. What
    both need (call labels, the timing method's figures, the protocol, the build tools) lives outside child/, so
    kforge's process never loads a module written to run beside candidate code."""
    found = _into_the_child(evaluator_graph())
    assert not found, "\n".join(found)


def test_the_child_rule_fails_on_an_injected_import(tmp_path):
    """A rule that reads no import cannot fail: each way a module can name the child, read from source as the rule
    reads it (at module level and in a function), is caught in a parent or verdict module, not in a child one."""
    forms = ["from evaluator.child.timing import bench", "from evaluator.child import trials",
             "import evaluator.child.comparer", "from evaluator import child",
             "def late():\n    from evaluator.child.trials import rep_seed"]
    for n, form in enumerate(forms):
        (tmp_path / f"m{n}.py").write_text(form + "\n")
        imported = _evaluator_imports(tmp_path / f"m{n}.py")
        for module, caught in [("evaluator.parent.injected", True), ("evaluator.verdict.injected", True),
                               ("evaluator.child.injected", False)]:
            assert bool(_into_the_child({module: imported})) is caught, (form, module)


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
