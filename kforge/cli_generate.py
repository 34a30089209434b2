"""`kforge generate`: the agent loop from the command line, with rich progress and a best-per-problem table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from db import Database, DatabaseError
from evaluator import EvalSettings, EvaluatorError
from pipeline.llm import LLMError, LLMSettings, OpenAIChat, Provider
from pipeline.loop import DEFAULT_OUT, Candidate, Loop, RunConfig, RunResult
from pipeline.replay import ReplayProvider
from kforge.app import UserError, eval_settings, open_db
from reference_problems import Problem, ProblemError, resolve_problem

out = Console()
err = Console(stderr=True)


def candidate_line(c: Candidate) -> dict:
    v = c.verdict
    return {"problem": c.problem, "turn": c.turn, "sample": c.sample, "status": c.status,
            "speedup": v.speedup if v else None, "solution_sha256": v.solution_sha256 if v else None,
            "path": str(c.path) if c.path else None, "parent_sha256": c.parent_sha256,
            "extraction": c.extraction.status.value, "cause": (v.evidence.cause if v else "") or c.extraction.cause,
            "generation_id": c.generation_id, "cached": c.cached, "prompt_tokens": c.usage.prompt_tokens,
            "completion_tokens": c.usage.completion_tokens, "cost_usd": c.cost_usd}


def best_table(results: list[RunResult]) -> Table:
    table = Table(title="kforge generate: best candidate per problem")
    for col in ("problem", "status", "speedup", "turn", "candidates", "tokens in/out", "file", "cause"):
        table.add_column(col, overflow="fold")
    for r in results:
        best = r.best()
        if best is None:
            table.add_row(r.problem, "[red]no answer[/]", "-", "-", "0", "-", "-", "; ".join(r.errors))
            continue
        line = candidate_line(best)
        tokens = f"{sum(c.usage.prompt_tokens for c in r.candidates)}/{sum(c.usage.completion_tokens for c in r.candidates)}"
        style = "green" if line["status"] == "correct" else "red"
        speedup = f"{line['speedup']:.3g}x" if line["speedup"] else "-"
        table.add_row(r.problem, f"[{style}]{line['status']}[/]", speedup, str(best.turn), str(len(r.candidates)),
                      tokens, Path(line["path"]).name if line["path"] else "-", line["cause"])
    return table


def generate(
    problem: Annotated[str, typer.Option("--problem", "-p", help="registered name or path; several comma-separated")],
    samples: Annotated[int, typer.Option("--samples", "-n", min=1, help="candidates drawn per turn")] = 1,
    turns: Annotated[int, typer.Option("--turns", "-t", min=1, help="rounds: 1 = sample only, 2 = sample then refine once, ...")] = 1,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="model name (default $KFORGE_LLM_MODEL)")] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="OpenAI-compatible server (default $KFORGE_LLM_BASE_URL)")] = None,
    replay: Annotated[Optional[Path], typer.Option("--replay", help="serve recorded transcripts from this directory instead of an LLM")] = None,
    device: Annotated[Optional[str], typer.Option("--device", help="cpu or cuda (default: cuda if available)")] = None,
    size: Annotated[str, typer.Option("--size", help="full, small, or auto (small on CPU, full on CUDA)")] = "auto",
    db_url: Annotated[Optional[str], typer.Option("--db", help="SQLAlchemy URL (default: $KFORGE_DB or ~/.kforge/kforge.db)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object per candidate")] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="where candidate files are written")] = DEFAULT_OUT,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="LLM calls in flight")] = 4,
) -> None:
    """Ask an LLM for kernels, judge them, feed back what failed, and refine the best."""

    try:
        problems = [resolve_problem(name.strip()) for name in problem.split(",") if name.strip()]
        llm = LLMSettings(**{k: v for k, v in (("model", model), ("base_url", base_url)) if v})
        config = RunConfig(samples=samples, turns=turns, concurrency=concurrency, out_dir=out_dir,
                           temperature=llm.temperature, max_tokens=llm.max_tokens)
        provider = ReplayProvider(replay, model=model or "replay") if replay else OpenAIChat(llm)  # replay: free, offline
        results = run_all(provider, open_db(db_url), eval_settings(device, size), config, problems, json_out)
    except (UserError, ProblemError, DatabaseError, EvaluatorError, LLMError) as exc:
        err.print(f"kforge: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    for message in (e for r in results for e in r.errors):
        err.print(f"kforge: {message}", markup=False, highlight=False, soft_wrap=True)
    if not json_out:
        out.print(best_table(results))
    if not any(r.candidates for r in results):
        raise typer.Exit(1)


def run_all(provider: Provider, database: Database, settings: EvalSettings, config: RunConfig,
            problems: list[Problem], json_out: bool) -> list[RunResult]:
    """Progress counts LLM answers and verdicts; --json prints each candidate as it is judged."""
    total = 2 * config.samples * config.turns * len(problems)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, disable=json_out, transient=True) as progress:
        task = progress.add_task("generating", total=total)

        def on_event(kind: str, c: Candidate) -> None:
            progress.update(task, advance=1, description=f"{c.problem} turn {c.turn} sample {c.sample}: {c.status if kind == 'judged' else 'answered'}")
            if kind == "judged" and json_out:
                print(json.dumps(candidate_line(c)), flush=True)

        loop = Loop(provider, database, settings, config, events=on_event)
        return [loop.run(p) for p in problems]
