"""`kforge generate`: the agent loop from the command line, with rich progress and a best-per-problem table."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pydantic import ValidationError

from db import Database
from evaluator import EvalSettings
from kforge import paths, tables
from pipeline import runs
from pipeline.archive import ArchiveConfig
from pipeline.bandit import BanditConfig
from pipeline.budget import Budget, Meter
from pipeline.ledger import LedgerError, PriceTable
from pipeline.llm import LLMError, LLMSettings, OpenAIChat, Provider
from pipeline.loop import DEFAULT_OUT, Candidate, Loop, RunConfig, RunResult
from pipeline.replay import ReplayProvider
from pipeline.retrieval import RetrievalConfig
from kforge.app import (BackendOpt, DbOpt, DeviceOpt, PanelledHelp, PrecisionOpt, SizeOpt, UserError, check_sizes, err,
                        eval_settings, friendly, open_db, out, problems_dir, resolve_precision, say_compile_plan)
from kforge.settings import LLMEnv
from reference_problems import Problem, resolve_problem


def candidate_line(c: Candidate, run_id: int | None = None) -> dict:
    v = c.verdict
    return {"kind": "candidate", "run_id": run_id, "problem": c.problem, "turn": c.turn, "sample": c.sample,
            "model": c.model, "island": c.island, "status": c.status, "duplicate_of": c.duplicate_of,
            "taken_back": c.taken_back,
            "speedup": v.speedup if v else None, "solution_sha256": v.solution_sha256 if v else None,
            "path": str(c.path) if c.path else None, "parent_sha256": c.parent_sha256,
            "extraction": c.extraction.status.value, "cause": (v.evidence.cause if v else "") or c.extraction.cause,
            "generation_id": c.generation_id, "cached": c.cached, "prompt_tokens": c.usage.prompt_tokens,
            "completion_tokens": c.usage.completion_tokens, "cost_usd": c.cost_usd}


def cached_mark(c: Candidate) -> str:
    """Says that no call was made for this answer: this run's own from before --resume, or a stored one."""
    return " (taken back)" if c.taken_back else " (cached)" if c.cached else ""


def verdict_line(c: Candidate) -> str:
    """One judged answer for a reader, as it comes: where it sits in the run, its verdict, its SHA prefix."""
    v = c.verdict
    speed = f" {v.speedup:.2f}x" if v and v.speedup is not None else ""
    said = cached_mark(c) + (f" (as {c.duplicate_of[:tables.SHA_SHOWN]})" if c.duplicate_of else "")
    sha = f"  {v.solution_sha256[:tables.SHA_SHOWN]}" if v and v.solution_sha256 else ""
    return f"kforge: {c.problem} turn {c.turn} sample {c.sample} [{c.model}]: {c.status}{speed}{said}{sha}"


def summary_line(database: Database, run_id: int, results: list[RunResult], reason: str | None) -> dict:
    """The object `--json` ends with: how the run ended, its spend by problem and model, each problem's best."""
    spend = [row.model_dump(exclude={"run_id"}) for row in database.spend(by=("problem", "model"), run_id=run_id)]
    best = {r.problem: candidate_line(b, run_id) if (b := r.best()) else None for r in results}
    return {"kind": "summary", "run_id": run_id, "status": "stopped" if reason else "finished", "stop_reason": reason,
            "spend": spend, "best": best}


def best_rows(results: list[RunResult]) -> list[dict]:
    """Each problem's best answer as tables.generated shows it (tokens: in the spend table under it)."""
    rows = []
    for r in results:
        best = r.best()
        if best is None:
            rows.append({"problem": r.problem, "status": "no answer", "mark": "", "speedup": "-", "turn": "-",
                         "answers": "0", "sha256": "-", "cause": "; ".join(r.errors)})
            continue
        line = candidate_line(best)
        cached = sum(c.cached for c in r.candidates)
        rows.append({"problem": r.problem, "status": line["status"], "mark": cached_mark(best),
                     "speedup": f"{line['speedup']:.3g}x" if line["speedup"] else "-", "turn": str(best.turn),
                     "answers": f"{len(r.candidates)} ({cached} cached)" if cached else str(len(r.candidates)),
                     "sha256": line["solution_sha256"] or "-", "cause": line["cause"]})
    return rows


@dataclass(frozen=True)
class GenerateOptions:
    """`kforge generate`'s options, declared once: typer reads them from these fields (`generate`'s signature)."""

    problem: Annotated[Optional[str], typer.Option("--problem", "-p", metavar="NAME", help="registered name or path (several: a,b,c)")] = None
    samples: Annotated[int, typer.Option("--samples", "-n", min=1, metavar="N", help="candidates drawn per turn")] = 1
    turns: Annotated[int, typer.Option("--turns", "-t", min=1, metavar="N", help="rounds: 1 samples, 2 samples then refines once, ...")] = 1
    model: Annotated[Optional[list[str]], typer.Option("--model", "-m", metavar="MODEL", help="model (default $KFORGE_LLM_MODEL); repeat it for several, picked per request by value")] = None
    temperatures: Annotated[Optional[str], typer.Option("--temperatures", metavar="T,T", help="temperatures each model is asked at, picked per request by value")] = None
    base_url: Annotated[Optional[str], typer.Option("--base-url", metavar="URL", help="OpenAI-compatible server (default $KFORGE_LLM_BASE_URL)")] = None
    replay: Annotated[Optional[Path], typer.Option("--replay", metavar="DIR", help="answer with the transcripts recorded in DIR, not an LLM")] = None
    device: DeviceOpt = None
    size: SizeOpt = "auto"
    backend: BackendOpt = None
    precision: PrecisionOpt = "fp32"
    db_url: DbOpt = None
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object per candidate")] = False
    out_dir: Annotated[Path, typer.Option("--out", metavar="DIR", help="where candidate files are written")] = DEFAULT_OUT
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, metavar="N", help="LLM calls in flight")] = 4
    prices: Annotated[Optional[Path], typer.Option("--prices", metavar="FILE", help='USD per 1M tokens, as JSON: {"MODEL": {"prompt": P, "completion": C}} (default $KFORGE_LLM_PRICES)')] = None
    budget_tokens: Annotated[Optional[int], typer.Option("--budget-tokens", min=1, metavar="N", help="stop once the run's calls used N tokens")] = None
    budget_usd: Annotated[Optional[float], typer.Option("--budget-usd", min=0, metavar="USD", help="stop once they cost USD dollars (needs a price)")] = None
    budget_seconds: Annotated[Optional[float], typer.Option("--budget-seconds", min=0, metavar="S", help="stop after S wall seconds (over all its sessions)")] = None
    budget_candidates: Annotated[Optional[int], typer.Option("--budget-candidates", min=1, metavar="N", help="stop after N paid answers")] = None
    resume: Annotated[Optional[int], typer.Option("--resume", metavar="ID", help="continue run ID as stored (budget options given replace its budget)")] = None
    islands: Annotated[int, typer.Option("--islands", min=0, metavar="N", help="program archive of N islands (0: refine the best)")] = 0
    migration_interval: Annotated[int, typer.Option("--migration-interval", min=1, metavar="N", help="turns between migrations of each island's best")] = 2
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="seed of the archive's parent draws and the choice of model")] = 0
    inspirations: Annotated[int, typer.Option("--inspirations", min=0, metavar="N", help="other archive kernels shown in a refine prompt")] = 0
    crossover: Annotated[float, typer.Option("--crossover", min=0, max=1, metavar="P", help="probability that a parent is combined with another")] = 0.0
    contrast: Annotated[float, typer.Option("--contrast", min=0, metavar="X", help="with --islands: also show archive kernels X times slower and faster (0: none)")] = 0.0
    related_kernels: Annotated[int, typer.Option("--related", min=0, metavar="N", help="verified kernels of similar problems in a problem's first prompts")] = 0
    sol_stop: Annotated[float, typer.Option("--sol-stop", min=0, max=1, metavar="F", help="a problem is done once a kernel reaches this fraction of the speed of light (0: never)")] = 0.9
    profile: Annotated[bool, typer.Option("--profile/--no-profile", help="on a GPU with ncu: Nsight Compute metrics of each round's best correct kernel in the next refine prompt")] = True
    fresh: Annotated[bool, typer.Option("--fresh", help="ask the server even where the db holds this request's answer (the new one is stored too)")] = False


class GenerateHelp(PanelledHelp):
    """`kforge generate --help`: its options in the groups a user looks for them in."""

    PANELS = {"Answers": ("problem", "samples", "turns", "model", "temperatures", "base_url", "replay", "fresh",
                          "concurrency"),
              "Judging": ("device", "size", "backend", "precision", "profile", "sol_stop"),
              "Search": ("islands", "migration_interval", "seed", "inspirations", "crossover", "contrast",
                         "related_kernels"),
              "Budget": ("prices", "budget_tokens", "budget_usd", "budget_seconds", "budget_candidates", "resume"),
              "Output": ("db_url", "json_out", "out_dir")}


@friendly(also=(LLMError, LedgerError, runs.RunError))
def generate(**given: Any) -> None:
    """Ask an LLM for kernels, judge them, feed back what failed, and refine the best."""
    options = GenerateOptions(**given)
    database, run_id, results = _run(options)
    _summarize(database, run_id, results, options.json_out)


generate.__signature__ = inspect.signature(GenerateOptions, eval_str=True)  # type: ignore[attr-defined]


def _run(o: GenerateOptions) -> tuple[Database, int, list[RunResult]]:
    """A new run (its input checked before a database file is made) or the resumed one, run to its end."""
    budget = _budget(o.budget_tokens, o.budget_usd, o.budget_seconds, o.budget_candidates)
    if o.resume is not None and o.problem:
        raise UserError("--resume runs the stored run's problems and settings: drop --problem (only budget options may change)")
    if o.resume is None:
        spec = _spec(o, budget)
        problems, provider, llm, settings = _prepare(spec, o.prices)
        database = open_db(o.db_url)
        spec.device, spec.size = settings.device, settings.size
        run_id, meter = runs.start(database, spec)
    else:
        database, run_id = open_db(o.db_url), o.resume
        spec, meter = runs.resume(database, o.resume, budget)
        problems, provider, llm, settings = _prepare(spec, o.prices)
    config = spec.config.model_copy(update={"temperature": llm.temperature, "max_tokens": llm.max_tokens,
                                            "fresh": o.fresh})
    return database, run_id, run_all(provider, database, settings, config, problems, o.json_out, run_id, meter)


def _spec(o: GenerateOptions, budget: Budget | None) -> runs.RunSpec:
    """A new run's problems, models and settings, each checked (one-line errors)."""
    archive = _archive(o.islands, migration_interval=o.migration_interval, seed=o.seed, inspirations=o.inspirations,
                       crossover=o.crossover, contrast=o.contrast)
    config = RunConfig(samples=o.samples, turns=o.turns, concurrency=o.concurrency, out_dir=paths.folder("--out", o.out_dir),
                       budget=budget or Budget(), archive=archive,
                       retrieval=RetrievalConfig(k=o.related_kernels) if o.related_kernels else None,
                       sol_stop=o.sol_stop or None, profile=o.profile,
                       bandit=BanditConfig(temperatures=_temperatures(o.temperatures), seed=o.seed))
    models = list(dict.fromkeys(o.model or []))
    return runs.RunSpec(problems=_names(o.problem), model=models[0] if models else None, models=models[1:],
                        base_url=o.base_url, replay=str(o.replay) if o.replay else None, device=o.device or "",
                        size=o.size, backend=o.backend, precision=resolve_precision(o.precision), config=config)


def _summarize(database: Database, run_id: int, results: list[RunResult], json_out: bool) -> None:
    """What the run said, its best kernels and spend (a table, or with --json one summary object) and how it ended;
    when nothing answered and no budget ended the run, one line saying why, and exit 1."""
    reason = next((r.stopped for r in results if r.stopped), None)
    errors = [e for r in results for e in r.errors]
    if errors and not reason and not any(r.candidates for r in results):
        more = f" (and {len(errors) - 1} more failed)" if len(errors) > 1 else ""
        err.print(f"kforge: error: no answer came: {errors[0]}{more}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    profiled = [f"{r.problem}: Nsight Compute on {sha[:12]}: {said}" for r in results for sha, said in r.profiles.items()]
    for message in errors + [f"{r.problem} done: {r.reached}" for r in results if r.reached] + profiled + _cached(results):
        err.print(f"kforge: {message}", markup=False, highlight=False, soft_wrap=True)
    if json_out:
        print(json.dumps(summary_line(database, run_id, results, reason)), flush=True)
    else:
        out.print(tables.generated(best_rows(results)))
        out.print(tables.spend(database.spend(by=("problem", "model"), run_id=run_id), f"run {run_id}: spend"))
    ending = f"stopped: {reason}; continue with --resume {run_id}" if reason else "finished"
    err.print(f"kforge: run {run_id} {ending}", markup=False, highlight=False, soft_wrap=True)
    if not any(r.candidates for r in results) and not reason:
        raise typer.Exit(1)


def _cached(results: list[RunResult]) -> list[str]:
    """Why the spend can be smaller than the answers: those stored before cost nothing now."""
    answers = [c for r in results for c in r.candidates]
    stored = sum(c.cached and not c.taken_back for c in answers)
    return [f"{stored} of {len(answers)} answers were stored before (no call made): --fresh asks the server again"] if stored else []


def _names(problem: str | None) -> list[str]:
    names = [name.strip() for name in (problem or "").split(",") if name.strip()]
    if not names:
        raise UserError("--problem is required (or --resume RUN_ID)")
    return names


def _temperatures(given: str | None) -> list[float]:
    try:
        return [float(t) for t in (given or "").split(",") if t.strip()]
    except ValueError:
        raise UserError(f"--temperatures: expected comma-separated numbers, got {given!r}") from None


def _archive(islands: int, **options: float) -> ArchiveConfig | None:
    if not islands:
        return None
    try:
        return ArchiveConfig(islands=islands, **options)
    except ValidationError as exc:
        raise UserError(f"archive: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None


def _budget(tokens: int | None, usd: float | None, seconds: float | None, candidates: int | None) -> Budget | None:
    """The budget options given, or None when none is (a resumed run then keeps its own)."""
    given = {"max_tokens": tokens, "max_cost_usd": usd, "max_wall_s": seconds, "max_candidates": candidates}
    if all(v is None for v in given.values()):
        return None
    try:
        return Budget(**given)
    except ValidationError as exc:
        raise UserError(f"budget: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}") from None


def _prepare(spec: runs.RunSpec, prices: Path | None) -> tuple[list[Problem], list[Provider], LLMSettings, EvalSettings]:
    """The spec's problems, providers (one per model), LLM settings and evaluation settings, each checked (one-line
    errors)."""
    problems = [resolve_problem(name, problems_dir()) for name in spec.problems]
    llm = _llm_settings(spec, prices)
    settings = eval_settings(spec.device or None, spec.size, backend=spec.backend, precision=spec.precision)
    check_sizes(problems, settings)
    if spec.replay:
        models = [spec.model or "replay", *spec.models]
        return problems, [ReplayProvider(Path(spec.replay), model=m) for m in models], llm, settings
    models = [llm.model, *spec.models]
    unpriced = [m for m in models if m not in llm.prices.root]
    if spec.config.budget.max_cost_usd is not None and unpriced:
        raise UserError(f"--budget-usd needs a price for model {unpriced[0]!r}: pass --prices or set KFORGE_LLM_PRICES")
    return problems, [OpenAIChat(llm.model_copy(update={"model": m})) for m in models], llm, settings


def _llm_settings(spec: runs.RunSpec, prices: Path | None) -> LLMSettings:
    try:
        llm = LLMEnv(**{k: v for k, v in (("model", spec.model), ("base_url", spec.base_url)) if v}).settings()
    except ValidationError as exc:
        raise UserError(f"KFORGE_LLM_*: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}") from None
    return llm.model_copy(update={"prices": PriceTable.load(prices)}) if prices else llm


def run_all(provider: Provider | list[Provider], database: Database, settings: EvalSettings, config: RunConfig,
            problems: list[Problem], json_out: bool, run_id: int | None = None,
            meter: Meter | None = None) -> list[RunResult]:
    """Progress counts LLM answers and verdicts; --json prints each candidate as it is judged. However the run
    ends, its row says how (stopped by a budget, finished, or interrupted) and how long it ran."""
    total = 2 * config.samples * config.turns * len(problems)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    meter = meter or Meter(config.budget)
    results: list[RunResult] = []
    with Progress(*columns, console=err, disable=json_out, transient=True) as progress:
        task = progress.add_task("generating", total=total)

        def on_event(kind: str, c: Candidate) -> None:
            progress.update(task, advance=1, description=f"{c.problem} turn {c.turn} sample {c.sample}: {c.status if kind == 'judged' else 'answered'}")
            if kind == "judged" and json_out:
                print(json.dumps(candidate_line(c, run_id)), flush=True)
            elif kind == "judged":
                progress.console.print(verdict_line(c), markup=False, highlight=False, soft_wrap=True)

        loop = Loop(provider, database, settings, config, events=on_event, run_id=run_id, meter=meter)
        say_compile_plan(settings)
        try:
            for p in problems:
                results.append(loop.run(p))
        except BaseException:
            if run_id is not None:
                database.update_run(run_id, status="stopped", stop_reason="interrupted", add_wall_s=meter.session_wall_s())
            raise
    if run_id is not None:
        runs.finish(database, run_id, meter, results)
    return results
