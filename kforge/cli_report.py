"""`kforge problems` (list, import), `kforge report`, `kforge export`, `kforge import`: the commands about what is
stored rather than about judging, registered on the app by register()."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from kforge import paths, tables
from kforge.app import DbOpt, JsonOpt, UserError, app, err, friendly, open_db, out, problems_dir
from reference_problems import import_problems, list_problems, user_problem_dir

problems_app = typer.Typer(help="List the registered problems, or import KernelBench ones.", invoke_without_command=True)


@friendly
def report(out_dir: Annotated[Path, typer.Option("--html", metavar="DIR", help="directory to write index.html and candidate pages into")],
           db: DbOpt = None) -> None:
    """Render the stored results as a static HTML leaderboard (no network needed to view it)."""
    from kforge.report import write_report  # jinja2 and the db load when a report is written

    with paths.writing("--html", paths.folder("--html", out_dir)):
        index = write_report(open_db(db), out_dir)
    out.print(f"wrote {index}  (open file://{index.resolve()} in a browser)", markup=False, highlight=False, soft_wrap=True)


@friendly
def export(file: Annotated[Optional[Path], typer.Option("--jsonl", metavar="FILE", help="file to write, '-' for stdout")] = None,
           trace: Annotated[Optional[Path], typer.Option("--trace", metavar="FILE", help="write the evolution trace instead: one JSON line per LLM call ('-' for stdout)")] = None,
           db: DbOpt = None) -> None:
    """Write every problem, solution and evaluation as JSON lines, for `kforge import` elsewhere (--jsonl), or the
    evolution trace of the agent's calls (--trace)."""
    if (file is None) == (trace is None):
        raise UserError("give one of --jsonl FILE or --trace FILE")
    from kforge.trace import export_trace
    from kforge.transfer import export_jsonl

    option, target, write = ("--jsonl", file, export_jsonl) if file is not None else ("--trace", trace, export_trace)
    to_stdout = str(target) == "-"
    if not to_stdout:
        paths.file(option, target)  # before a db is opened (or made)
    database = open_db(db)
    if to_stdout:
        counts = write(database, typer.get_text_stream("stdout"))
    else:
        with paths.writing(option, target), target.open("w") as fh:
            counts = write(database, fh)
    said = ", ".join(tally(n, f"{kind}s") for kind, n in counts.items())
    err.print(f"exported {said}" if counts else "nothing to export")


@friendly
def import_(file: Annotated[Path, typer.Argument(help="a `kforge export --jsonl` file")], db: DbOpt = None,
            as_json: JsonOpt = False) -> None:
    """Add the records of an export to this database; importing the same file twice adds nothing."""
    from kforge.transfer import TransferError, import_jsonl

    if not file.is_file():
        raise UserError(f"{file}: is a folder; name a file that `kforge export --jsonl` wrote" if file.is_dir()
                        else f"no such file: {file}")
    try:
        counts = import_jsonl(open_db(db), file)
    except TransferError as exc:
        raise UserError(str(exc)) from None
    if as_json:
        print(json.dumps(dict(counts)))
    else:
        out.print(", ".join(tally(n, what) for what, n in counts.items()) or "nothing to import")


def tally(n: int, what: str) -> str:
    """`1 problem added`, `2 problems added`: a count, its noun (the first word of `what`) singular for one."""
    noun, space, rest = what.partition(" ")
    return f"{n} {noun.removesuffix('s') if n == 1 else noun}{space}{rest}"


@friendly
def _list_problems(as_json: bool, level: int | None) -> None:
    rows = [{"name": p.name, "level": p.meta.level, "atol": p.meta.atol, "rtol": p.meta.rtol,
             "description": p.meta.description, "path": str(p.path)} for p in list_problems(problems_dir())
            if level is None or p.meta.level == level]
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    if rows:
        out.print(tables.problems(rows, "reference problems"))
    else:
        out.print(f"no registered problem of level {level}")


@problems_app.callback()
def problems_list(ctx: typer.Context, as_json: JsonOpt = False,
                  level: Annotated[Optional[int], typer.Option("--level", metavar="N", help="only this KernelBench level")] = None) -> None:
    """List the registered problems (reference ones and imported ones), by level, in their numbers' order."""
    if ctx.invoked_subcommand is None:
        _list_problems(as_json, level)


@problems_app.command("import")
@friendly
def problems_import(path: Annotated[Path, typer.Argument(help="KernelBench checkout (or its level folders)")],
                    as_json: JsonOpt = False) -> None:
    """Copy KernelBench problem files (levelN/NN_name.py) into the user problem dir, so --problem NAME finds them."""
    imported, skipped = import_problems(path, problems_dir())
    if as_json:
        print(json.dumps({"imported": [{"name": p.name, "level": p.meta.level, "path": str(p.path)} for p in imported],
                          "skipped": [{"path": str(f), "reason": why} for f, why in skipped]}, indent=1))
        return
    out.print(tables.problems([{"name": p.name, "level": p.meta.level} for p in imported],
                              f"imported into {user_problem_dir(problems_dir())}", described=False))
    for f, why in skipped:
        err.print(f"kforge: skipped {f}: {why}", markup=False, highlight=False, soft_wrap=True)


def register() -> None:
    """Adds these commands to kforge's app (once); `problems` is a group whose default action lists them."""
    if any(command.callback is report for command in app.registered_commands):
        return
    app.command("report")(report)
    app.command("export")(export)
    app.command("import")(import_)
    app.add_typer(problems_app, name="problems")
