"""The CLI's tables, readable at any width: words stay whole, long names are shortened to what tells them apart,
and free text (a verdict's cause) goes under the table as numbered notes instead of into a narrow column.
`--json` carries everything in full."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from evaluator.contracts import Status

if TYPE_CHECKING:
    from db import Database, SpendRow

_HEX_RUN = re.compile(r"[0-9a-f]{16,}")
_NAME_WIDTH = 26  # problem and solution names wrap at underscores to this width
WIDE = 120  # from here on the leaderboard shows every column


def fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def short_name(path: str | None, fallback: str = "-") -> str:
    """A solution's file name with any long hash cut to 8 characters (seed_001_a7341888….py)."""
    if not path:
        return fallback
    return _HEX_RUN.sub(lambda m: m.group()[:8] + "…", Path(path).name)


def wrap_name(name: str, width: int = _NAME_WIDTH, breaks: str = "_") -> str:
    """An identifier broken into lines after underscores (12_Matmul_with_diagonal_ / matrices_), never inside
    a part: KernelBench's names run to 60 characters. Model names break after / and - instead."""
    lines = [""]
    cut = re.escape(breaks)
    for part in re.findall(rf"[^{cut}]*[{cut}]|[^{cut}]+$", name):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


SHA_SHOWN = 12  # the sha256 prefix the tables print: `kforge show`, `delete` and `prune` take it


def _named(problem: str, solution: str, sha256: str | None = None) -> Text:
    """Problem, solution file and the sha256 prefix that `kforge show` takes (unless the file name already is it)."""
    text = Text(wrap_name(problem), style="bold")
    text.append("\n" + wrap_name(solution), style="dim")
    if sha256 and solution != sha256[:SHA_SHOWN]:
        text.append("\n" + sha256[:SHA_SHOWN], style="cyan")
    return text


def _table(title: str, named: str) -> Table:
    """A table that spends its width on content: rules under the header only, one space between columns."""
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    table.add_column(named, no_wrap=True)
    return table


def _numbers(table: Table, *names: str) -> None:
    for name in names:
        table.add_column(name, justify="right", no_wrap=True)


def results(lines: list[dict]) -> Group:
    """One row per verdict; its cause and hint, and where a verdict taken back came from, follow the table as note
    [n], wrapped at words."""
    table = _table("kforge results", "problem / solution")
    table.add_column("status", no_wrap=True)
    _numbers(table, "speedup", "cand ms", "ref ms", "#")
    notes = []
    for n, ln in enumerate(lines, 1):
        style = "green" if ln["status"] == Status.CORRECT else "red"
        sha = ln["solution_sha256"] or ""
        table.add_row(_named(ln["problem"], short_name(ln["path"], sha[:SHA_SHOWN] or "-"), sha),
                      f"[{style}]{ln['status']}[/]", fmt(ln["speedup"]), fmt(ln["candidate_ms"]), fmt(ln["reference_ms"]),
                      str(n))
        failed = ln["status"] != Status.CORRECT and (ln["cause"] or ln["hint"])
        said = [reused_note(ln["reused_from"], ln["solution_sha256"])] if ln.get("reused_from") else []
        said += [ln["cause"]] if failed and ln["cause"] else []
        if failed or said:
            note = Text(f"[{n}] ", style="bold")
            note.append(": ".join(said))
            if failed and ln["hint"]:
                note.append(f"\n    → {ln['hint']}")
            notes.append(note)
    return Group(table, *notes)


def reused_note(source: dict, own_sha256: str) -> str:
    """Where a verdict taken back came from: its stored evaluation, when, and the code it judged if not this one."""
    twin = source["solution_sha256"] != own_sha256
    return (f"reused: stored verdict #{source['evaluation_id']} of {source['stored_at'][:19].replace('T', ' ')} UTC"
            + (f", judged on {source['solution_sha256'][:SHA_SHOWN]} (the same code, normalized)" if twin else ""))


def leaderboard(rows: list[dict], width: int, precision: str = "fp32") -> Table:
    """Per problem and board (device and size, at the precision of the title): the best speedup, and the
    solutions counted once each by their latest verdict (one status per line); below WIDE columns the times and
    the compile baseline give way (they are in --json)."""
    wide = width >= WIDE
    table = _table(f"kforge leaderboard ({precision})", "problem / best solution")
    _numbers(table, "lvl")
    table.add_column("device\nsize", no_wrap=True)
    _numbers(table, "best\nspeedup", *(["vs\ncompile", "cand ms", "ref ms"] if wide else []))
    table.add_column("solutions by\nlatest verdict", no_wrap=True)
    for r in rows:
        counts = "\n".join(f"{k} {v}" for k, v in sorted(r["solutions_by_status"].items())) or "-"
        cells = [_named(r["problem"], short_name(r["best_path"], (r["best_sha256"] or "-")[:SHA_SHOWN]), r["best_sha256"]),
                 str(r["level"]), board_name(r["device_name"], r["size"]), fmt(r["best_speedup"])]
        cells += [fmt(r["speedup_vs_compile"]), fmt(r["candidate_ms"]), fmt(r["reference_ms"])] if wide else []
        table.add_row(*cells, counts)
    return table


def board_name(device_name: str | None, size: str | None) -> str:
    """A device's name broken at spaces into lines of at most 12 characters, then the size: no verdict yet, '-'."""
    if device_name is None:
        return "-"
    return "\n".join([*wrap_name(device_name, 12, breaks=" ").split("\n"), size or "-"]).replace(" \n", "\n")


def leaderboard_csv(fields: list[str], rows: list[dict], statuses: list[str]) -> tuple[list[str], list[dict]]:
    """(columns, rows) of the leaderboard as CSV, one value per cell: the problem, its board, its plain fields, then
    solutions_STATUS for every status (how many solutions have it as their latest verdict on the row's board). The
    evaluation counts by status are left to --json: n_evaluations is their total."""
    board = ["device_name", "size", "precision"]
    plain = [f for f in fields if not f.endswith("_by_status") and f not in board and f.removeprefix("best_") not in board]
    columns = plain[:2] + board + plain[2:] + [f"solutions_{status}" for status in statuses]
    return columns, [{**{f: r[f] for f in columns if f in r}, **{f"solutions_{st}": r["solutions_by_status"].get(st, 0)
                                                                 for st in statuses}} for r in rows]


def spend(rows: list[SpendRow], title: str) -> Table:
    """LLM spend per problem and model (SpendRow): calls, tokens in and out, dollars, and the calls no price
    covered (so a total never looks complete when it is not)."""
    table = _table(title, "problem / model")
    _numbers(table, "calls", "tok in", "tok out", "USD", "unpriced")
    for r in rows:
        name = Text(wrap_name(r.problem or "-"), style="bold")
        name.append("\n" + wrap_name(r.model or "-", breaks="/-"), style="dim")
        table.add_row(name, str(r.calls), str(r.prompt_tokens), str(r.completion_tokens), f"{r.cost_usd:.4f}",
                      str(r.unpriced))
    return table


def written_by(database: Database, problem: str, sha256: str) -> list[str]:
    """Lines (each under 80 columns) naming the LLM calls that wrote a solution, their tokens and dollars, and the
    spend of their run."""
    lines = []
    for g in (g for g in database.generations(problem) if g.solution_sha256 == sha256):
        cost = "unpriced" if g.cost_usd is None else f"${g.cost_usd:.4f}"
        lines.append(f"call #{g.id} by {g.model}: {g.prompt_tokens} + {g.completion_tokens} tokens, {cost}")
        island = "" if g.island is None else f", island {g.island}"
        lines.append(f"  turn {g.turn}, sample {g.sample}, {g.prompt_kind}{island}")
        run = database.get_run(g.run_id) if g.run_id is not None else None
        if run is not None:
            lines.append(f"run {run.id} {run.status}: {run.calls} calls, {run.prompt_tokens + run.completion_tokens} "
                         f"tokens, ${run.cost_usd:.4f}, {run.wall_s:.0f} s")
            lines += [f"  {run.stop_reason}"] if run.stop_reason else []
    return lines


def evidence_lines(evidence: dict) -> list[str]:
    """A verdict's evidence as a person reads it: one `key: value` line per field, texts (a cause, a compiler's
    output, a traceback) as their own indented lines, small mappings on one line; empty fields left out."""
    lines = []
    for key, value in evidence.items():
        if value in (None, "", [], {}):
            continue
        if isinstance(value, str) and "\n" in value.strip():
            lines += [f"{key}:", *(f"  {line}" for line in value.rstrip().splitlines())]
        elif isinstance(value, dict):
            lines.append(f"{key}: " + ", ".join(f"{k}={_plain(v)}" for k, v in value.items() if v not in (None, "", [], {})))
        else:
            lines.append(f"{key}: {_plain(value)}")
    return lines


def _plain(value) -> str:
    if isinstance(value, float):
        return fmt(value, ".4g")
    if isinstance(value, (list, tuple)):
        return ", ".join(_plain(v) for v in value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_plain(v)}" for k, v in value.items()) + "}"
    return str(value)
