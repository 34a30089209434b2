"""The names a run's calls and their saved outputs go by, which both sides must spell alike: the child labels each
call's outputs and writes them, kforge's process asks for calls by label, reads their files and judges them by
label. Standard library only, so the parent's side needs nothing of the child's to name them."""

from __future__ import annotations

OUTPUT_SUFFIX = ".out"  # raw bytes (CPU runs), read back by evaluator.child.correctness.load_outputs in the comparer
TIMED = "timed_"  # label prefix of a timed call's outputs: "timed_<rep>"


def timed_rep(label: str) -> int | None:
    """The rep of a timed call's label, None for any other label."""
    rest = label.removeprefix(TIMED)
    return int(rest) if rest != label and rest.lstrip("-").isdigit() else None
