"""The `kforge` command line: thin wiring of problems -> evaluator -> db, with one-line errors for bad input."""

from __future__ import annotations

import csv
import functools
from collections import Counter
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Iterable, Optional

import typer
from rich.table import Table
from rich.text import Text

from db import metrics
from evaluator.contracts import CandidateJob, EvalSettings, Status
from evaluator.static import check_source
from judging.judge import Backend, Judged, judge_and_store
from kforge import kernelbench, tables
from kforge.progress import BatchProgress
from reference_problems import Problem, ProblemError, list_problems, resolve_problem

from kforge.app import (AddressOpt, BackendOpt, DbOpt, DeviceOpt, GpusOpt, JsonOpt, PrecisionOpt, ProblemOpt, RunnerOpt,
                        SizeOpt, UserError, app, err, check_sizes, eval_settings, friendly, open_db, out, problems_dir,
                        resolve_precision, resolve_size, runner_for, say_compile_plan)

if TYPE_CHECKING:  # the heavy packages (SQLAlchemy, torch) load in the commands that use them, not at start-up
    from db import Database

def candidate_file(path: Path) -> tuple[Path, bytes]:
    """A readable .py file and its bytes, read once: the job carries them to the db and the evaluator."""
    if path.is_dir():
        raise UserError(f"{path} is a folder: submit judges one file (kforge evaluate {path} judges a folder)")
    if not path.is_file():
        raise UserError(f"no such file: {path}")
    if path.suffix != ".py":
        raise UserError(f"{path} is not a Python file (expected a .py candidate)")
    return path.resolve(), path.read_bytes()


def refusal(path: Path, raw: bytes, settings: EvalSettings) -> str | None:
    """Why a file is no kforge candidate (not UTF-8 text, prose, no ModelNew: a problem file itself), in one line;
    None for a candidate. Nothing is stored for a refused file."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"{path.name}: not UTF-8 text: not a kforge candidate"
    check = check_source(text, settings.language)
    return f"{path.name}: {check.cause}: not a kforge candidate" if check.status is Status.INVALID else None


def problem_for(path: Path, problem: str | None) -> Problem:
    """--problem wins; otherwise solutions/<problem>/<file>.py names it, else a KernelBench kernel file's name."""
    if problem:
        return resolve_problem(problem, problems_dir())
    try:
        return resolve_problem(path.parent.name, problems_dir())
    except ProblemError:
        if kernelbench.sample_of(path):
            return kernelbench.problems_for([path], list_problems(problems_dir()))[path]
        raise UserError(f"cannot infer the problem of {path} (its folder '{path.parent.name}' is no problem); pass --problem") from None


def verdict_line(judged: Judged) -> dict:
    """One candidate's verdict, named by its own code; a verdict taken back says where from (reused_from)."""
    v, source = judged.verdict, judged.reused_from
    reused_from = source and {"evaluation_id": source.evaluation_id, "stored_at": source.stored_at.isoformat(),
                              "solution_sha256": source.solution_sha256}
    return {"status": v.status.value, "speedup": v.speedup, "speedup_vs_compile": v.speedup_vs_compile,
            "problem": v.problem, "solution_sha256": judged.job.sha256, "path": str(judged.job.path),
            "cause": v.evidence.cause, "hint": v.evidence.hint, "candidate_ms": v.candidate.median_ms if v.candidate else None,
            "reference_ms": v.reference.median_ms if v.reference else None, "device_name": v.device_name,
            "size": v.size, "precision": v.precision, "evaluation_id": judged.evaluation_id, "reused": judged.reused,
            "reused_from": reused_from}


def run_jobs(database: Database, jobs: list[CandidateJob], settings: EvalSettings, rerun: bool, progress: bool,
             backend: Backend | None = None) -> Iterable[dict]:
    """Every job judged and stored by judging.judge.judge_and_store, with its KernelBench provenance: a stored verdict
    of unchanged code on the same device is reused (unless rerun), the rest is evaluated under a progress bar."""
    submissions = [kernelbench.submission(job) for job in jobs]
    with BatchProgress(err, show=progress, before=functools.partial(say_compile_plan, settings)) as bar:
        for judged in judge_and_store(database, submissions, settings, rerun=rerun, backend=backend,
                                      on_evaluate=bar.start, on_stage=bar.stage):
            v = judged.verdict
            if judged.reused:
                bar.reused += 1
            else:
                bar.done(v.solution_path, v.status.value, v.evidence.stage_s.get("device_wait", 0.0),
                         f"{v.problem} {Path(v.solution_path or '').name}: {v.status.value}"
                         + (f" {v.speedup:.3g}x" if v.speedup else ""), own_s=v.wall_s)
            yield verdict_line(judged)


def emit(lines: Iterable[dict], as_json: bool) -> list[dict]:
    """Print the verdicts; exit 1 (after printing them all) if kforge's own side failed for any candidate."""
    collected = []
    try:
        for line in lines:
            collected.append(line)
            if as_json:
                print(json.dumps(line), flush=True)
    except KeyboardInterrupt:  # what finished is stored and shown; the progress line says what did not
        if not as_json and collected:
            out.print(tables.results(collected))
        raise
    if not as_json:
        out.print(tables.results(collected))
    failed = sum(Status(line["status"]).kforge_failed for line in collected)
    if failed:
        err.print(f"kforge: {failed} candidate(s) not judged: kforge's own side failed (their problem's reference, "
                  "or kforge's own step in the child; see the causes)",
                  markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    return collected


@app.command()
@friendly
def doctor(as_json: JsonOpt = False) -> None:
    """Which sandbox layers candidates run under on this machine (each enforced by the kernel, or why not)."""
    import tempfile

    from evaluator.parent.jail_spec import probe_layers

    with tempfile.TemporaryDirectory(prefix="kforge-doctor-") as scratch:
        os.chmod(scratch, 0o711)  # as a batch's root: the child uid reaches its folder inside
        layers = probe_layers(Path(scratch))
    if as_json:
        print(json.dumps(layers, indent=1))
        return
    table = Table(title="sandbox layers")
    for col in ("layer", "state"):
        table.add_column(col, overflow="fold")
    for layer, state in layers.items():
        table.add_row(layer, f"[{'green' if state.startswith('on') else 'red'}]{state}[/]")
    out.print(table)


@app.command()
@friendly
def prompt(problem: Annotated[str, typer.Argument(help="registered name or path")],
           target: Annotated[str, typer.Option(metavar="LANG", help="cuda, cpu (C++) or triton kernels")] = "cuda", size: SizeOpt = "auto") -> None:
    """Print the LLM prompt for a problem, stating the sizes it will be evaluated at (small for CPU kernels)."""
    from prompts import render_prompt

    if target not in ("cuda", "cpu", "triton"):
        raise UserError(f"--target must be cuda, cpu or triton, not '{target}'")
    print(render_prompt(resolve_problem(problem, problems_dir()), target=target, size=resolve_size(size, target)))


RerunOpt = Annotated[bool, typer.Option("--rerun", help="judge again even where a verdict of unchanged code on this "
                                       "device, size and precision is stored (the newest counts)")]


@app.command()
@friendly
def submit(file: Annotated[Path, typer.Argument(help="candidate .py defining ModelNew")], problem: ProblemOpt = None,
           device: DeviceOpt = None, size: SizeOpt = "auto", rerun: RerunOpt = False,
           db: DbOpt = None, as_json: JsonOpt = False, backend: BackendOpt = None,
           precision: PrecisionOpt = "fp32") -> None:
    """Evaluate one candidate file and store the verdict."""
    path, raw = candidate_file(file)
    settings = eval_settings(device, size, backend=backend, precision=precision)
    if why := refusal(path, raw, settings):
        raise UserError(why)
    job = CandidateJob(path=path, problem=problem_for(path, problem), source=raw)
    check_sizes([job.problem], settings)
    emit(run_jobs(open_db(db), [job], settings, rerun, progress=not as_json), as_json)


def collect(directory: Path, problem: str | None, settings: EvalSettings) -> tuple[list[CandidateJob], list[str]]:
    """Every candidate .py under DIR whose folder names a problem, or that KernelBench named
    level_L_problem_P_sample_S_kernel.py (its problem imported by `kforge problems import`); all of them with
    --problem. Returns them and why each other file there is no candidate (said as found, one line each)."""
    if directory.is_file():
        raise UserError(f"{directory} is a file: evaluate judges the .py files of a folder (kforge submit {directory} "
                        "judges one file)")
    if not directory.is_dir():
        raise UserError(f"no such directory: {directory}")
    fixed = resolve_problem(problem, problems_dir()) if problem else None
    known = {p.name: p for p in list_problems(problems_dir())}
    paths = sorted(directory.rglob("*.py"))
    samples = {} if fixed else kernelbench.problems_for([p for p in paths if p.parent.name not in known], known.values())
    jobs, refused = [], []
    for path in paths:
        target = fixed or known.get(path.parent.name) or samples.get(path)
        if target is None:
            err.print(f"kforge: skipping {path}: folder '{path.parent.name}' is no registered problem (use --problem)",
                      markup=False, highlight=False, soft_wrap=True)
        elif why := refusal(path, raw := path.read_bytes(), settings):
            refused.append(why)
            err.print(f"kforge: refused {why}", markup=False, highlight=False, soft_wrap=True)
        else:
            jobs.append(CandidateJob(path=path.resolve(), problem=target, source=raw))
    if not jobs:
        raise UserError(f"no candidate .py files under {directory}" + (f": {refused_summary(refused)}" if refused else ""))
    return jobs, refused


def refused_summary(refused: list[str]) -> str:
    """How many files were refused, and why: `3 file(s) refused, not kforge candidates (2 no ModelNew defined at
    module level, 1 no line of Python code (prose?))`."""
    reasons = Counter(why.split(": ")[1] if ": " in why else why for why in refused)
    return (f"{len(refused)} file(s) refused, not kforge candidates ("
            + ", ".join(f"{n} {reason}" for reason, n in reasons.items()) + ")")


@app.command("evaluate")
@friendly
def evaluate_dir(directory: Annotated[Path, typer.Argument(help="e.g. solutions/")], problem: ProblemOpt = None,
                 device: DeviceOpt = None, size: SizeOpt = "auto",
                 jobs: Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, metavar="N",
                                                             help="compiles at once (default: sized to the cores and memory)")] = None,
                 rerun: RerunOpt = False, db: DbOpt = None, as_json: JsonOpt = False,
                 compile_baseline: Annotated[bool, typer.Option(help="also time torch.compile(reference)")] = False,
                 gpus: GpusOpt = None, runner: RunnerOpt = "local", address: AddressOpt = None,
                 backend: BackendOpt = None, precision: PrecisionOpt = "fp32") -> None:
    """Evaluate every candidate in a directory (solutions/<problem>/<name>.py, or a KernelBench run directory of
    level_L_problem_P_sample_S_kernel.py files). A file that is no candidate (prose, no ModelNew, a problem file) is
    refused with one line and nothing stored for it. Exit 1 if a problem's reference failed (its candidates are
    reference_error), 2 on bad input or when no file was a candidate."""
    settings = eval_settings(device, size, jobs, compile_baseline, gpus, backend, precision)
    candidates, refused = collect(directory, problem, settings)
    check_sizes([job.problem for job in candidates], settings)
    run = runner_for(runner, address)
    try:
        emit(run_jobs(open_db(db), candidates, settings, rerun, progress=not as_json, backend=run), as_json)
    finally:
        if refused:
            err.print(f"kforge: {refused_summary(refused)}", markup=False, highlight=False, soft_wrap=True)


@app.command()
@friendly
def leaderboard(problem: ProblemOpt = None, db: DbOpt = None, as_json: JsonOpt = False,
                as_csv: Annotated[bool, typer.Option("--csv", help="one CSV row per problem and device/size, for a "
                                                      "spreadsheet")] = False,
                level: Annotated[Optional[int], typer.Option("--level", metavar="N", help="only problems of this level")] = None,
                suite: Annotated[Optional[str], typer.Option("--suite", metavar="SUITE", help="only kernelbench (problems imported from "
                                                             "KernelBench) or kforge (the others)")] = None,
                precision: PrecisionOpt = "fp32") -> None:
    """Best correct speedup per problem on each device and size, fast_p, and per device and size the geometric mean
    of the per-problem bests.

    fast_p is KernelBench's: of ALL evaluated samples, the fraction that are correct AND have speedup > p over eager
    PyTorch. A sample is a stored solution on one device and size, judged by its latest evaluation; `skipped` ones
    never ran and do not count. problem_fast_p is best-of-k: of the problems judged on a device and size, the
    fraction whose best correct speedup there is > p. Status counts count solutions, each by its latest verdict
    (reruns replace a verdict). Published numbers are per level and over KernelBench's problems alone: compare with
    --suite kernelbench --level N. One precision per board: results at fp32 and at half precision are never ranked
    together."""
    from db import BoardRow

    if as_json and as_csv:
        raise UserError("--json and --csv: give one")
    if suite not in (None, *kernelbench.SUITES):
        raise UserError(f"--suite must be {' or '.join(kernelbench.SUITES)}, not '{suite}'")
    database = open_db(db)
    precision = resolve_precision(precision)
    name = resolve_problem(problem, problems_dir()).name if problem else None
    rows = board_rows(database, name, level, suite, precision)
    fast, samples = kernelbench.fast_p(database, problem=name, level=level, precision=precision, suite=suite)
    summary = {"precision": precision, "level": level, "suites": [suite] if suite else sorted({r["suite"] for r in rows}),
               "fast_p": fast, "samples": samples, "boards": board_summaries(rows)}
    if as_json:
        print(json.dumps({"problems": rows, **summary}, indent=1))
    elif as_csv:
        columns, flat = tables.leaderboard_csv([*BoardRow.model_fields, "suite"], rows, [st.value for st in Status])
        writer = csv.DictWriter(sys.stdout, fieldnames=columns)
        writer.writeheader()
        writer.writerows(flat)
    else:
        out.print(tables.leaderboard(rows, out.width, precision))
        for line in summary_lines(summary):
            out.print(line, markup=False, highlight=False, soft_wrap=True)


def board_rows(database: Database, problem: str | None, level: int | None, suite: str | None,
               precision: str) -> list[dict]:
    """The board's rows as plain values, each with its problem's suite, of the level and suite asked for (None:
    every one)."""
    suites = kernelbench.suites(database)
    rows = [{**r.model_dump(mode="json"), "suite": suites[r.problem]} for r in database.boards(problem, precision=precision)
            if level is None or r.level == level]
    return [r for r in rows if suite is None or r["suite"] == suite]


def board_summaries(rows: list[dict]) -> list[dict]:
    """Per device and size the rows are on: how many problems had code judged there (a problem whose every
    candidate was skipped never ran, as a skipped sample does not count), their problem_fast_p (best-of-k, the
    formula of db.metrics) and the geometric mean of their best speedups."""
    boards: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r["device_name"] is not None:
            boards.setdefault((r["device_name"], r["size"]), [])
            if any(Status(status).judged for status in r["evaluations_by_status"]):
                boards[r["device_name"], r["size"]].append(r)
    summaries = []
    for (device_name, size), judged in boards.items():
        best = [r["best_speedup"] for r in judged if r["best_speedup"]]
        summaries.append({"device_name": device_name, "size": size, "problems": len(judged),
                          "problem_fast_p": metrics.fast_p(best, len(judged)), "geomean_speedup": metrics.geomean(best)})
    return summaries


def summary_lines(summary: dict) -> list[str]:
    """The leaderboard's figures under its table, each kind of fast_p by its one name, each line within 80
    columns: a figure's explanation on the line under it."""
    fast = "  ".join(f"fast_{p:g}={v:.2f}" for p, v in summary["fast_p"].items())
    pooled = ", every device and size together" if len(summary["boards"]) > 1 else ""
    lines = [suite_line(summary)] if summary.get("suites") else []
    lines += [fast, f"  (KernelBench's, over {summary['samples']} samples{pooled})"] if summary["samples"] \
        else ["no evaluated samples"]
    for b in summary["boards"]:
        n = b["problems"]
        lines.append(f"{b['device_name']} {b['size']}: " + (f"{n} problem{'s' * (n != 1)} judged" if n else
                     "no code judged (every verdict skipped or kforge's own failure)"))
        lines += [f"  geomean best speedup={tables.fmt(b['geomean_speedup'])}, "
                  f"problem_fast_1={b['problem_fast_p'][1.0]:.2f} (best-of-k)"] if n else []
    return lines


def suite_line(summary: dict) -> str:
    """Which problems the figures are over: one suite, or both together, which no published fast_p compares with."""
    level = f", level {summary['level']}" if summary.get("level") is not None else ""
    if len(summary["suites"]) == 1:
        return f"suite {summary['suites'][0]}{level}"
    return f"suites {' and '.join(summary['suites'])} together{level} (--suite picks one)"


@app.command()
@friendly
def show(solution: Annotated[str, typer.Argument(help="solution sha256 (a prefix is enough) or file path")],
         db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """The stored evaluations of one solution, with their evidence."""
    path = Path(solution)
    sha = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else solution
    database = open_db(db)
    rows = database.evaluations(solution_prefix=sha)
    if not rows:
        raise UserError(f"no stored evaluation for {solution}")
    matches = sorted({r.solution_sha256 for r in rows})
    if len(matches) > 1:
        shown = ", ".join(f"{m[:12]} ({next(r.problem for r in rows if r.solution_sha256 == m)})" for m in matches[:5])
        raise UserError(f"'{solution}' matches {len(matches)} solutions: {shown}{', ...' if len(matches) > 5 else ''}; "
                        "give a longer prefix")
    if as_json:
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=1))
        return
    for r in rows:
        heading(f"#{r.id} {r.problem} {Path(r.solution_path or '').name} [{r.solution_sha256[:12]}] on {r.device_name} "
                f"({r.size})")
        out.print(f"status: [bold]{r.status}[/]  speedup: {tables.fmt(r.speedup)}  at {r.created_at:%Y-%m-%d %H:%M}")
        for line in tables.evidence_lines(r.evidence):  # never hard-wrapped: a long line folds at the terminal's edge
            out.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in tables.written_by(database, rows[0].problem, matches[0]):
        out.print(line, markup=False, highlight=False)


def heading(title: str) -> None:
    """A verdict's header: a rule with the title in it where it fits, else a rule and the title under it, wrapped
    at words (a rule would cut it). Text: a [SHA] starting with a letter is no markup tag."""
    if len(title) + 4 <= out.width:
        out.rule(Text(title), style="dim")
    else:
        out.rule(style="dim")
        out.print(Text(title))


_LAZY = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def _listed_only() -> None:
    """Ask an LLM for kernels, judge them, feed back what failed, and refine the best."""


def register_commands(generate: bool) -> None:
    """Every command on kforge's app (once). The agent loop (torch, the LLM client) loads only where `generate` is
    to run or be shown whole; elsewhere it is a name in the list with the same help line, so that `kforge --help`
    starts without it."""
    from kforge import cli_delete, cli_serve, cli_status
    from kforge.cli_report import register

    if not any(command.name == "generate" for command in app.registered_commands):
        if generate:
            from kforge.cli_generate import GenerateHelp, generate as run_generate

            app.command("generate", cls=GenerateHelp)(run_generate)
        else:
            app.command("generate", context_settings=_LAZY)(_listed_only)
    register()  # problems (list, import), report, export, import
    cli_status.register()
    cli_delete.register()  # delete, prune
    cli_serve.register()


def main() -> None:
    register_commands(sys.argv[1:2] == ["generate"])
    app()
