"""`kforge delete` and `kforge prune`: taking stored solutions out of the db (a file of prose, a verdict that said
nothing about the code), with what depended on them kept consistent by db.removal. Registered by register()."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from evaluator.contracts import Status
from kforge import tables
from kforge.app import DbOpt, UserError, app, friendly, open_db, out, problems_dir
from reference_problems import names_a_file, resolve_problem

if TYPE_CHECKING:  # SQLAlchemy loads in the commands, not at start-up
    from db import Database, Removed, SolutionRow

_HEX = frozenset("0123456789abcdefABCDEF")


def _say(line: str) -> None:
    out.print(line, markup=False, highlight=False, soft_wrap=True)


def one_solution(database: Database, solution: str) -> SolutionRow:
    """The stored solution a sha256 prefix or a file names; a UserError when none or several match."""
    path = Path(solution)
    if path.is_file():
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
    elif solution and set(solution) <= _HEX:
        sha = solution
    else:
        raise UserError(f"'{solution}' is neither a file nor a sha256 prefix (hex digits)")
    matches = database.solutions_by_prefix(sha)
    if not matches:
        raise UserError(f"no stored solution {'of ' + solution if path.is_file() else 'starts with ' + repr(solution)}")
    if len(matches) > 1:
        shown = ", ".join(f"{m.sha256[:tables.SHA_SHOWN]} ({m.problem})" for m in matches[:5])
        raise UserError(f"'{solution}' matches {len(matches)} solutions: {shown}{', ...' if len(matches) > 5 else ''}; "
                        "give a longer prefix")
    return matches[0]


def _counted(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def what_went(removed: Removed) -> str:
    """What a deletion removed and what it kept unlinked, in words; the parts that are zero left out."""
    gone = [_counted(removed.evaluations, "evaluation")]
    gone += [_counted(removed.archive_cells, "archive cell")] if removed.archive_cells else []
    kept = [_counted(removed.calls_unlinked, "LLM call")] if removed.calls_unlinked else []
    kept += [_counted(removed.children_unlinked, "solution built on it")] if removed.children_unlinked else []
    return " and ".join(gone) + (f"; kept, no longer linked: {', '.join(kept)}" if kept else "")


@friendly
def delete(solution: Annotated[str, typer.Argument(help="solution sha256 (a prefix is enough) or file path")],
           db: DbOpt = None) -> None:
    """Delete one stored solution and every verdict of it; exit 2, deleting nothing, if no solution or several
    match.

    Kept consistent: the leaderboard's counts and bests no longer include its verdicts; archive cells it held are
    emptied; the LLM calls that wrote it stay (their spend still counts), and so do the solutions built on it,
    without a parent. Nothing else is touched."""
    database = open_db(db)
    sol = one_solution(database, solution)
    removed = database.delete_solutions([sol.sha256])
    name = f" {Path(sol.path).name}" if sol.path else ""
    _say(f"deleted {sol.sha256[:tables.SHA_SHOWN]} ({sol.problem}{name}) with {what_went(removed)}")


@friendly
def prune(status: Annotated[Optional[list[str]], typer.Option("--status", metavar="STATUS", help="instead: the "
                                                              "solutions whose every verdict has this status "
                                                              "(repeatable)")] = None,
          problem: Annotated[Optional[str], typer.Option("--problem", "-p", metavar="NAME", help="only this problem's solutions")] = None,
          dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would go; delete nothing")] = False,
          db: DbOpt = None) -> None:
    """Delete the stored solutions no verdict judged: those with no verdict at all, and those whose every verdict is
    `skipped` (never ran here) or kforge's own failure (`reference_error`). With --status, the solutions whose
    every verdict has one of the statuses given. A solution that an evaluate or generate still running has stored
    has no verdict yet: prune while none runs.

    Kept consistent, as by `kforge delete`: the leaderboard's counts and bests no longer include their verdicts;
    archive cells they held are emptied; the LLM calls that wrote them stay (their spend still counts), and so do
    the solutions built on them, without a parent. Nothing else is touched."""
    unknown = sorted(set(status or ()) - {st.value for st in Status})
    if unknown:
        raise UserError(f"--status: no status {', '.join(unknown)} (one of {', '.join(st.value for st in Status)})")
    statuses = status or [st.value for st in Status if not st.judged]
    database = open_db(db)
    name = _stored_problem(database, problem) if problem else None
    if dry_run:
        found = database.prunable(statuses, problem=name, unevaluated=not status)
        for f in found:
            verdicts = ", ".join(f"{k} {v}" for k, v in sorted(f.evaluations_by_status.items())) or "no verdict"
            _say(f"{f.sha256[:tables.SHA_SHOWN]}  {f.problem}  {tables.short_name(f.path)}  {verdicts}")
        n = sum(sum(f.evaluations_by_status.values()) for f in found)
        _say(f"would prune {_counted(len(found), 'solution')} with {_counted(n, 'evaluation')} (--dry-run: nothing deleted)")
        return
    removed = database.prune(statuses, problem=name, unevaluated=not status)
    _say(f"pruned {_counted(len(removed.solutions), 'solution')} with {what_went(removed)}")


def _stored_problem(database: Database, problem: str) -> str:
    """The name of a problem the db holds, given as stored or as the path of its problem file."""
    stored = {p.name for p in database.problems()}
    name = resolve_problem(problem, problems_dir()).name if names_a_file(problem) else problem
    if name not in stored:
        raise UserError(f"no stored problem '{name}' (`kforge leaderboard` lists the problems with solutions)")
    return name


def register() -> None:
    """Adds `delete` and `prune` to kforge's app (once)."""
    for command in (delete, prune):
        if not any(c.callback is command for c in app.registered_commands):
            app.command(command.__name__)(command)
