"""Stage 1 (in the child): import a file as a module. For a candidate this is where load_inline compiles."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType


def import_file(path: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_problem(path: Path, overrides: dict) -> ModuleType:
    """The reference problem, resized by overriding its module globals (get_inputs reads them at call time)."""
    module = import_file(path, "kforge_problem")
    for name, value in overrides.items():
        setattr(module, name, value)
    return module


def built_libraries(build_dir: Path) -> set[Path]:
    return set(build_dir.rglob("*.so"))


def build_steps(build_dir: Path) -> dict[str, float]:
    """Seconds per ninja step (each object file, the link) of the builds under build_dir, from ninja's own log:
    says which translation unit a slow compile spends its time in."""
    steps = {}
    for log in build_dir.rglob(".ninja_log"):
        for line in log.read_text(errors="replace").splitlines()[1:]:
            fields = line.split("\t")
            if len(fields) == 5 and fields[0].isdigit() and fields[1].isdigit():
                steps[fields[3]] = (int(fields[1]) - int(fields[0])) / 1e3  # a rebuilt output: its last entry wins
    return steps


def load_candidate(path: Path, build_dir: Path) -> tuple[ModuleType, float, bool]:
    """Import the candidate; returns it, the seconds spent, and whether no new extension had to be built."""
    before = built_libraries(build_dir)
    start = time.perf_counter()
    module = import_file(path, "kforge_candidate")
    elapsed = time.perf_counter() - start
    return module, elapsed, built_libraries(build_dir) <= before
