"""KernelBench compatibility: its generated-kernel layout, and its fast_p over samples (the formula: db.metrics).

KernelBench (github.com/ScalingIntelligence/KernelBench) writes every generated kernel flat into a run directory as
`level_{L}_problem_{P}_sample_{S}_kernel.py`. P is the NN of the problem file `levelL/NN_name.py`, which
`kforge problems import` keeps (with its levelL/ folder) in the user problem dir and registers as `NN_name`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from db import metrics
from evaluator.contracts import CandidateJob, Status
from judging.judge import Submission
from reference_problems import Problem, ProblemError
from reference_problems.registry import LEVEL_DIR

if TYPE_CHECKING:  # annotations only: the CLI's start-up must not load SQLAlchemy
    from db import Database

SUITES = ("kernelbench", "kforge")  # KernelBench's imported problems, and every other (suite_of)
SAMPLE_FILE = re.compile(r"level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py")
PROBLEM_ID = re.compile(r"(\d+)_")  # levelL/NN_name.py


class Sample(NamedTuple):
    level: int
    problem_id: int
    sample_id: int

    @property
    def tag(self) -> str:
        """Stored as the solution's seed_id: which generated sample this code is."""
        return f"kernelbench:level_{self.level}_problem_{self.problem_id}_sample_{self.sample_id}"


def sample_of(path: Path) -> Sample | None:
    """The (level, problem id, sample id) a KernelBench kernel file's name encodes; None for any other file."""
    match = SAMPLE_FILE.fullmatch(Path(path).name)
    return Sample(*map(int, match.groups())) if match else None


def kernelbench_id(path: Path) -> tuple[int, int] | None:
    """(level, NN) of a problem file stored as levelL/NN_name.py, as `problems import` leaves it; None otherwise."""
    level, number = LEVEL_DIR.fullmatch(path.parent.name), PROBLEM_ID.match(path.stem)
    return (int(level.group(1)), int(number.group(1))) if level and number else None


def suite_of(path: str | Path) -> str:
    """The suite a problem belongs to, from the path its file was registered under: one laid out as KernelBench's
    levelL/NN_name.py (as `problems import` keeps it, and as a sample names its problem) is KernelBench's, any
    other (reference_problems/, a file given by path) kforge's. Read from the stored path alone, so a db imported
    from another machine splits the same way; published fast_p compares with the kernelbench suite only."""
    return "kernelbench" if kernelbench_id(Path(path)) else "kforge"


def suites(database: Database) -> dict[str, str]:
    """Every stored problem's suite, by name."""
    return {p.name: suite_of(p.path) for p in database.problems()}


def problems_for(paths: Iterable[Path], problems: Iterable[Problem]) -> dict[Path, Problem]:
    """The problem of every KernelBench kernel file among paths (other files are left out). Raises ProblemError,
    one line, when a sample's problem was not imported or is ambiguous: nothing is evaluated then."""
    index: dict[tuple[int, int], list[Problem]] = {}
    for problem in problems:
        if (key := kernelbench_id(problem.path)) is not None:
            index.setdefault(key, []).append(problem)
    found, missing = {}, []
    for path in paths:
        if (sample := sample_of(path)) is None:
            continue
        matches = index.get((sample.level, sample.problem_id), [])
        if len(matches) > 1:
            names = ", ".join(sorted(p.name for p in matches))
            raise ProblemError(f"{path.name}: KernelBench level {sample.level} problem {sample.problem_id} is ambiguous "
                               f"({names} are registered); pass --problem")
        if matches:
            found[path] = matches[0]
        else:
            missing.append((path, sample))
    if missing:
        path, sample = missing[0]
        more = f" (and {len(missing) - 1} more samples)" if len(missing) > 1 else ""
        numbers = sorted(number for level, number in index if level == sample.level)
        if numbers:  # the level is imported: the sample names a problem it does not have
            raise ProblemError(f"{path.name}: KernelBench level {sample.level} has no problem {sample.problem_id}{more}: "
                               f"{len(numbers)} level-{sample.level} problems are imported, numbered from {numbers[0]} to {numbers[-1]}")
        raise ProblemError(f"{path.name}: KernelBench level {sample.level} problem {sample.problem_id} is not imported{more}; "
                           f"run kforge problems import PATH first (PATH: your KernelBench checkout)")
    return found


def submission(job: CandidateJob) -> Submission:
    """The job as judging stores it: a KernelBench sample as origin 'generated', with its tag as seed_id."""
    sample = sample_of(job.path)
    if sample is None:
        return Submission(job=job)
    return Submission(job=job, origin="generated", seed_id=sample.tag)


def fast_p(database: Database, thresholds: Iterable[float] = metrics.FAST_P, problem: str | None = None,
           level: int | None = None, precision: str | None = None,
           suite: str | None = None) -> tuple[dict[float, float], int]:
    """KernelBench's fast_p: of ALL evaluated samples, the fraction that are correct AND have speedup > p
    (db.metrics.fast_p over samples). Returns ({p: fraction}, n); ({}, 0) when nothing is evaluated. A sample is a
    stored solution on one device and size (at `precision`, or at each), judged by its latest stored evaluation
    (reruns do not count twice), of the problems of `suite` (or of every suite); a
    verdict that did not judge the code (Status.judged: `skipped`, kforge's own failure) is no evaluated sample.
    Identical code is stored once, so two samples with the same source count once."""
    names = None if suite is None else [name for name, its in suites(database).items() if its == suite]
    judged = [(status, speedup) for status, speedup in database.latest_verdicts(problem, level, precision, names)
              if Status(status).judged]
    speedups = [speedup for status, speedup in judged if status == Status.CORRECT and speedup is not None]
    return metrics.fast_p(speedups, len(judged), thresholds), len(judged)
