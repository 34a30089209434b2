"""The CLI's tables, readable at any width: one line a row where it can be, words kept whole, a long name capped at
a word with an ellipsis, a solution named by the 12-character SHA prefix `kforge show` takes (a KernelBench sample
by its number), and free text (a verdict's cause) under the table as numbered notes instead of in a narrow column.
`--json` carries everything in full."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.table import Table
from rich.text import Text

from evaluator.contracts import Status
from kforge.kernelbench import sample_of

if TYPE_CHECKING:
    from db import Database, SpendRow

_HEX_RUN = re.compile(r"[0-9a-f]{16,}")
SHA_SHOWN = 12  # the sha256 prefix the tables print: `kforge show`, `delete` and `prune` take it
WIDE = 120  # from here on the leaderboard shows every column
_TIMES = ("speedup", "cand\nms", "ref\nms")
_NARROWEST = 16  # a name column is never squeezed below this: the table grows past the width instead


def fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def short_name(path: str | None, fallback: str = "-") -> str:
    """A solution's file name with any long hash cut to 8 characters (seed_001_a7341888….py)."""
    if not path:
        return fallback
    return _HEX_RUN.sub(lambda m: m.group()[:8] + "…", Path(path).name)


def cap(name: str, width: int, breaks: str = "_") -> str:
    """`name` if it fits `width`, else its leading parts (each ending at one of `breaks`) that fit with an ellipsis
    after them: 75_conv_transposed_2D_… . The first part is always kept whole, so no word is ever cut."""
    if len(name) <= width:
        return name
    kept = ""
    for part in re.findall(rf"[^{re.escape(breaks)}]*[{re.escape(breaks)}]|.+$", name):
        if kept and len(kept) + len(part) + 1 > width:
            break
        kept += part
    return kept + "…"


def solution_label(path: str | None, sha256: str | None) -> str:
    """How a row names a solution beside its problem: a KernelBench sample by its number (`sample 3`; the file name
    only repeats the problem), a file named by its own hash not at all (the SHA column says it), else the file."""
    if not path:
        return ""
    if (sample := sample_of(Path(path))) is not None:
        return f"sample {sample.sample_id}"
    return "" if sha256 and Path(path).stem == sha256 else short_name(path)


def named(problem: str, label: str, room: int) -> Text:
    """Problem and solution label in `room` columns: on one line where both fit, or where the label is short (a
    KernelBench sample: then the problem is capped), else the label under the problem."""
    text = Text(style="bold")
    if not label or len(problem) + 1 + len(label) <= room or label.startswith("sample "):
        text.append(cap(problem, room - (len(label) + 1 if label else 0)))
        return text.append(f" {label}" if label else "", style="dim")
    return text.append(cap(problem, room)).append("\n" + cap(label, room), style="dim")


def _table(title: str) -> Table:
    """A table that spends its width on content: a rule under the header only, one space between columns."""
    return Table(title=title, box=box.SIMPLE_HEAD, padding=0, show_edge=False)


def _numbers(table: Table, *names: str) -> None:
    for name in names:
        table.add_column(name, justify="right", no_wrap=True)


def _room(width: int, *columns: Iterable[str]) -> int:
    """The columns left to a table's name column once these others (each its header, then its cells) and the
    space between columns are laid out."""
    used = sum(1 + max((len(line) for cell in column for line in str(cell).split("\n")), default=0) for column in columns)
    return max(width - used, _NARROWEST)


class _AtWidth:
    """A table laid out when it is printed, for the width it is printed at (a terminal's, COLUMNS, or a test's)."""

    def __init__(self, layout: Callable[[int], RenderableType]):
        self.layout = layout

    def __rich_console__(self, console: Console, options: ConsoleOptions):
        yield self.layout(options.max_width)


def _notes(notes: dict[int, str]) -> Table:
    """Numbered notes under a table, each wrapped at words with a hanging indent: [n] text."""
    grid = Table.grid(padding=(0, 1, 0, 0))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for n, note in notes.items():
        grid.add_row(Text(f"[{n}]", style="bold"), Text(note))
    return grid


def results(lines: list[dict]) -> _AtWidth:
    """One row per verdict, its notes under the table: its cause and hint where it failed, and where a verdict
    taken back came from."""
    return _AtWidth(lambda width: _results(lines, width))


def _results(lines: list[dict], width: int) -> Group:
    numbers = [str(n) for n in range(1, len(lines) + 1)]
    shas = [(ln["solution_sha256"] or "-")[:SHA_SHOWN] for ln in lines]
    cells = [[fmt(ln["speedup"]), fmt(ln["candidate_ms"]), fmt(ln["reference_ms"])] for ln in lines]
    room = _room(width, ["#", *numbers], ["sha256", *shas], ["status", *(ln["status"] for ln in lines)],
                 *(([head, *column] for head, column in zip(_TIMES, zip(*cells)))
                   if cells else ()))
    table = _table("kforge results")
    _numbers(table, "#")
    table.add_column("problem / solution", no_wrap=True)
    table.add_column("sha256", no_wrap=True, style="cyan")
    table.add_column("status", no_wrap=True)
    _numbers(table, *_TIMES)
    notes = {}
    for n, ln, sha, numbers_of in zip(numbers, lines, shas, cells):
        style = "green" if ln["status"] == Status.CORRECT else "red"
        table.add_row(n, named(ln["problem"], solution_label(ln["path"], ln["solution_sha256"]), room), sha,
                      Text(ln["status"], style=style), *numbers_of)
        failed = ln["status"] != Status.CORRECT
        said = [reused_note(ln["reused_from"], ln["solution_sha256"])] if ln.get("reused_from") else []
        said += [ln["cause"]] if failed and ln["cause"] else []
        hint = [f"→ {ln['hint']}"] if failed and ln["hint"] else []
        if said or hint:
            notes[int(n)] = "\n".join(filter(None, [": ".join(said), *hint]))
    return Group(table, _notes(notes))


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
    shas = [(r["best_sha256"] or "-")[:SHA_SHOWN] for r in rows]
    boards = [board_name(r["device_name"], r["size"]) for r in rows]
    counts = ["\n".join(f"{k} {v}" for k, v in sorted(r["solutions_by_status"].items())) or "-" for r in rows]
    figures = [[fmt(r["best_speedup"]), *([fmt(r["speedup_vs_compile"]), fmt(r["candidate_ms"]), fmt(r["reference_ms"])]
                                          if wide else [])] for r in rows]
    heads = ["best\nspeedup", *(["vs\ncompile", "cand ms", "ref ms"] if wide else [])]
    room = _room(width, ["sha256", *shas], ["lvl", *(str(r["level"]) for r in rows)], ["device\nsize", *boards],
                 *([head, *column] for head, column in zip(heads, zip(*figures))),
                 ["solutions by\nlatest verdict", *counts])
    table = _table(f"kforge leaderboard ({precision})")
    table.add_column("problem / best solution", no_wrap=True)
    table.add_column("sha256", no_wrap=True, style="cyan")
    _numbers(table, "lvl")
    table.add_column("device\nsize", no_wrap=True)
    _numbers(table, *heads)
    table.add_column("solutions by\nlatest verdict", no_wrap=True)
    for r, sha, board, count, figure in zip(rows, shas, boards, counts, figures):
        table.add_row(named(r["problem"], solution_label(r["best_path"], r["best_sha256"]), room), sha, str(r["level"]),
                      board, *figure, count)
    return table


def board_name(device_name: str | None, size: str | None) -> str:
    """A device's name broken at spaces into lines of at most 12 characters, then the size: no verdict yet, '-'."""
    if device_name is None:
        return "-"
    return "\n".join([*textwrap.wrap(device_name, 12, break_long_words=False, break_on_hyphens=False), size or "-"])


def leaderboard_csv(fields: list[str], rows: list[dict], statuses: list[str]) -> tuple[list[str], list[dict]]:
    """(columns, rows) of the leaderboard as CSV, one value per cell: the problem, its board, its plain fields, then
    solutions_STATUS for every status (how many solutions have it as their latest verdict on the row's board). The
    evaluation counts by status are left to --json: n_evaluations is their total."""
    board = ["device_name", "size", "precision"]
    plain = [f for f in fields if not f.endswith("_by_status") and f not in board and f.removeprefix("best_") not in board]
    columns = plain[:2] + board + plain[2:] + [f"solutions_{status}" for status in statuses]
    return columns, [{**{f: r[f] for f in columns if f in r}, **{f"solutions_{st}": r["solutions_by_status"].get(st, 0)
                                                                 for st in statuses}} for r in rows]


def spend(rows: list[SpendRow], title: str) -> _AtWidth:
    """LLM spend per problem and model (SpendRow): calls, tokens in and out, dollars, and the calls no price
    covered (so a total never looks complete when it is not)."""
    heads = ("calls", "tok in", "tok out", "USD", "unpriced")
    cells = [[str(r.calls), str(r.prompt_tokens), str(r.completion_tokens), usd(r), str(r.unpriced)]
             for r in rows]

    def layout(width: int) -> Table:
        room = _room(width, *([head, *column] for head, column in zip(heads, zip(*cells))) if cells else heads)
        table = _table(title)
        table.add_column("problem / model", no_wrap=True)
        _numbers(table, *heads)
        for r, numbers in zip(rows, cells):
            name = Text(cap(r.problem or "-", room), style="bold")
            table.add_row(name.append("\n" + cap(r.model or "-", room, breaks="/-"), style="dim"), *numbers)
        return table
    return _AtWidth(layout)


def usd(row: SpendRow) -> str:
    """The dollars a row's calls cost; '-' where no price covered any of them (not a cost of 0)."""
    return "-" if 0 < row.calls == row.unpriced else f"{row.cost_usd:.4f}"


def generated(rows: list[dict]) -> _AtWidth:
    """`kforge generate`'s best answer per problem: its status (and whether it was a stored answer), speedup, turn,
    how many answers came (and how many were stored ones) and its SHA prefix; causes and errors as notes."""
    def layout(width: int) -> Group:
        numbers = [str(n) for n in range(1, len(rows) + 1)]
        columns = [("speedup", [r["speedup"] for r in rows]), ("turn", [r["turn"] for r in rows]),
                   ("answers", [r["answers"] for r in rows]), ("sha256", [r["sha256"][:SHA_SHOWN] for r in rows])]
        marked = [r["status"] + r["mark"] for r in rows]
        room = _room(width, ["#", *numbers], ["status", *marked], *([head, *cells] for head, cells in columns))
        if room < 2 * _NARROWEST:  # the stored-answer mark goes under the status, so that names keep their room
            marked = [r["status"] + r["mark"].replace(" ", "\n", 1) for r in rows]
            room = _room(width, ["#", *numbers], ["status", *marked], *([head, *cells] for head, cells in columns))
        table = _table("kforge generate: best candidate per problem")
        _numbers(table, "#")
        table.add_column("problem", no_wrap=True, style="bold")
        table.add_column("status", no_wrap=True)
        _numbers(table, "speedup", "turn", "answers")
        table.add_column("sha256", no_wrap=True, style="cyan")
        for n, r, status in zip(numbers, rows, marked):
            table.add_row(n, cap(r["problem"], room), Text(status, style="green" if r["status"] == Status.CORRECT else "red"),
                          *(cells[int(n) - 1] for _, cells in columns))
        return Group(table, _notes({int(n): r["cause"] for n, r in zip(numbers, rows) if r["cause"]}))
    return _AtWidth(layout)


def problems(rows: list[dict], title: str, described: bool = True) -> _AtWidth:
    """The registered problems: name (capped; --json has it whole) and level, and with `described` the tolerances
    and, under the name, its description wrapped at words."""
    def layout(width: int) -> Table:
        columns = [["level", *(str(r["level"]) for r in rows)]]
        columns += [[tol, *(f"{r[tol]:g}" for r in rows)] for tol in ("atol", "rtol")] if described else []
        room = _room(width, *columns)
        table = _table(title)
        table.add_column("name", no_wrap=True)
        _numbers(table, *(column[0] for column in columns))
        for r, *cells in zip(rows, *(column[1:] for column in columns)):
            name = Text(cap(r["name"], room))
            if described and r["description"]:
                lines = textwrap.wrap(r["description"], room - 2, break_long_words=False, break_on_hyphens=False)
                name.append("".join(f"\n  {line}" for line in lines), style="dim")
            table.add_row(name, *cells)
        return table
    return _AtWidth(layout)


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
