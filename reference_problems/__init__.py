"""Reference problems: KernelBench-format files plus a KFORGE_META dict, read without importing them."""

from reference_problems.registry import (
    Problem,
    ProblemError,
    ProblemMeta,
    import_problems,
    list_problems,
    names_a_file,
    resolve_problem,
    user_problem_dir,
)

__all__ = [
    "Problem",
    "ProblemError",
    "ProblemMeta",
    "import_problems",
    "list_problems",
    "names_a_file",
    "resolve_problem",
    "user_problem_dir",
]
