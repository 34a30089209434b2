"""Reference problems: KernelBench-format files plus a KFORGE_META dict, read without importing them."""

from reference_problems.registry import Problem, ProblemError, ProblemMeta, list_problems, resolve_problem

__all__ = ["Problem", "ProblemError", "ProblemMeta", "list_problems", "resolve_problem"]
