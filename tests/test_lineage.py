"""The report's lineage pages, against a real SQLite file holding a scripted two-island run: one point per judged
call where its turn and speedup put it, an edge per parent link, the best so far as a rising step, and the tree of
calls with links that resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_report import H100, _correct, _solution, call

from db import Database
from kforge.report import write_report
from reference_problems import resolve_problem

ATTR = re.compile(r'([\w-]+)="([^"]*)"')


def _incorrect(db: Database, sha: str, status: str) -> None:
    db.add_evaluation(sha, status=status, cause=status, device="cuda", device_name=H100)


def script(db: Database) -> dict[str, int]:
    """relu, islands 0 and 1 over turns 0-2 (sample = island): 1.5x and a compile error, refined into 6x and 0.2x;
    then a near-duplicate of the 6x kernel (judged as its twin) and an answer with no code. The 1.5x kernel is also
    1.1x on the CPU at the small size. matmul: one call, nothing judged. softmax: a kernel but no calls."""
    for problem in ("relu", "softmax", "matmul"):
        p = resolve_problem(problem)
        db.upsert_problem(p.name, p.meta.level, str(p.path), p.sha256)
    run = db.start_run({})
    sha = {name: _solution(db, "relu", name, "coder") for name in ("a", "b", "c", "d", "e")}
    for name in ("c", "e"):
        db.upsert_solution(sha[name], "relu", "", normalized_sha256="n" * 64)  # fills the blank: e repeats c
    _correct(db, sha["a"], 2.0, 3.0)
    _correct(db, sha["a"], 2.0, 2.2, device_name="cpu", size="small")
    _incorrect(db, sha["b"], "compile_error")
    _correct(db, sha["c"], 1.0, 6.0)
    _correct(db, sha["d"], 5.0, 1.0)
    _solution(db, "softmax", "plain", "coder")

    def ask(name: str | None, turn: int, island: int, parent: int | None = None, **fields) -> int:
        return call(db, "relu", sha.get(name), turn, parent, run_id=run, island=island, sample=island,
                    prompt_tokens=100 + turn, completion_tokens=10 * turn, **fields)

    g = {"a": ask("a", 0, 0), "b": ask("b", 0, 1)}
    g |= {"c": ask("c", 1, 0, g["a"]), "d": ask("d", 1, 1, g["b"])}
    g |= {"e": ask("e", 2, 0, g["c"]), "none": ask(None, 2, 1, g["d"], extraction_status="no_code")}
    call(db, "matmul", None, 0, extraction_status="truncated")
    return g


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    with Database(f"sqlite:///{tmp_path / 'kforge.db'}") as db:
        calls = script(db)
        return write_report(db, tmp_path / "report").parent, calls


def _charts(page: Path) -> list[str]:
    return re.findall(r"<svg .*?</svg>", page.read_text(), re.S)


def _elements(svg: str, tag: str, cls: str) -> list[dict[str, str]]:
    return [dict(ATTR.findall(attrs)) for attrs in re.findall(rf'<{tag} class="{cls}"([^>]*)>', svg)]


def _dots(svg: str) -> dict[int, dict[str, str]]:
    return {int(d["data-call"]): d for d in _elements(svg, "circle", r"dot s-\w+")}


def _xy(dot: dict[str, str]) -> tuple[float, float]:
    return float(dot["cx"]), float(dot["cy"])


def test_lineage_pages_exist_for_problems_with_calls_and_are_linked(site) -> None:
    root, _ = site
    index = (root / "index.html").read_text()
    assert sorted(p.name for p in (root / "lineage").glob("*.html")) == ["matmul.html", "relu.html"]
    assert index.count('href="lineage/relu.html"') == 3  # its rows on the H100 and CPU boards, the lineage section
    assert 'href="lineage/matmul.html"' in index and "lineage/softmax" not in index
    matmul = (root / "lineage/matmul.html").read_text()
    assert "No answer of these calls has been judged yet." in matmul and "<svg" not in matmul
    page = root / "lineage/relu.html"
    hrefs = re.findall(r'href="([^"]+)"', page.read_text())
    assert sum(h.startswith("../candidates/") for h in hrefs) == 5 + 1  # the table's answers, e's twin
    assert sum(h.startswith("../calls/") for h in hrefs) == 6 + 5 + 1  # table rows, H100 dots, CPU dot
    for href in hrefs:
        if href.startswith("#"):
            assert f'id="{href[1:]}"' in page.read_text(), href
        elif not href.startswith("data:"):
            assert (page.parent / href).resolve().is_file(), href


def test_one_point_per_judged_call_at_its_turn_and_speedup(site) -> None:
    root, g = site
    h100, cpu = _charts(root / "lineage/relu.html")  # one chart per board, full size first
    dots = _dots(h100)
    assert sorted(dots) == sorted(g[k] for k in "abcde")  # the call with no code has no point
    assert sorted(dots, key=lambda i: float(dots[i]["cx"])) == [g[k] for k in "abcde"]  # by turn, then sample
    assert {i: dots[i]["data-speedup"] for i in dots} == {g["a"]: "1.5", g["b"]: "", g["c"]: "6.0", g["d"]: "0.2",
                                                         g["e"]: "6.0"}  # e is judged as its twin c
    assert float(dots[g["c"]]["cy"]) == float(dots[g["e"]]["cy"]) < float(dots[g["a"]]["cy"]) < float(dots[g["d"]]["cy"])
    none = next(float(y) - 4 for y, label in re.findall(r'<text class="tick" x="[\d.]+" y="([\d.]+)"[^>]*>([^<]+)<', h100)
                if label == "none")
    assert float(dots[g["b"]]["cy"]) == none > float(dots[g["d"]]["cy"])  # the compile error: on the 'none' line
    assert "dot s-compile_error" in h100 and "(log scale)" in h100 and ">1/8x<" in h100  # 0.2x to 6x: log axis
    assert dots[g["e"]]["data-status"] == "correct" and f'href="../calls/{g["e"]}.html"' in h100
    assert [d["data-speedup"] for d in _dots(cpu).values()] == ["1.1"] and "(log scale)" not in cpu  # no mixing


def test_an_edge_joins_each_call_to_its_parent(site) -> None:
    root, g = site
    h100, cpu = _charts(root / "lineage/relu.html")
    dots = _dots(h100)
    edges = {((float(e["x1"]), float(e["y1"])), (float(e["x2"]), float(e["y2"]))) for e in _elements(h100, "line", "edge")}
    assert edges == {(_xy(dots[g[p]]), _xy(dots[g[c]])) for p, c in ("ac", "bd", "ce")}
    assert _elements(cpu, "line", "edge") == []


def test_best_so_far_is_a_rising_step_through_each_new_best(site) -> None:
    root, g = site
    h100 = _charts(root / "lineage/relu.html")[0]
    dots = _dots(h100)
    (path,) = [e["d"] for e in _elements(h100, "path", "curve")]
    numbers = [float(v) for v in re.findall(r"[\d.]+", path)]
    start, steps = tuple(numbers[:2]), list(zip(numbers[2:-1:2], numbers[3:-1:2]))
    assert path.startswith("M ") and start == _xy(dots[g["a"]]) and steps == [_xy(dots[g["c"]])]
    ys = [start[1], *(y for _, y in steps)]
    assert all(later < earlier for earlier, later in zip(ys, ys[1:]))  # pixels grow downwards: each step is higher
    assert numbers[-1] > max(float(d["cx"]) for d in dots.values())  # held to the right edge


def test_table_lists_every_call_depth_first_with_its_parent_and_verdict(site) -> None:
    root, g = site
    html = (root / "lineage/relu.html").read_text()
    rows = re.findall(r'<tr id="call-(\d+)">(.*?)</tr>', html, re.S)
    assert [int(i) for i, _ in rows] == [g[k] for k in ("a", "c", "e", "b", "d", "none")]
    cells = {int(i): row for i, row in rows}
    assert re.findall(r"<th>([^<]+)</th></tr></thead>", html) == ["cpu, small"]  # a column per board, H100 first
    assert "</span> 1.5x</td>\n<td>" in cells[g["a"]] and "</span> 1.1x</td>" in cells[g["a"]]  # one per board
    assert f'href="#call-{g["c"]}"' in cells[g["e"]] and "judged as its twin" in cells[g["e"]]
    assert "</span> 6x</td>" in cells[g["e"]] and "102 / 20" in cells[g["e"]] and "1 run" in html
    assert "no_code" in cells[g["none"]] and "../candidates/" not in cells[g["none"]]
    assert "compile_error" in cells[g["b"]] and "<td><span class=\"muted\">-</span></td>" in cells[g["b"]]  # not on cpu


def test_a_crossover_records_both_parents_in_the_trace_and_draws_both_edges(tmp_path, settings) -> None:
    """Two elites of one island, each written by a stored call; a run whose turn 1 is a crossover (the scripted
    server on 127.0.0.1 answers it): its call stores both parents, the trace lists both and the lineage page draws
    an edge from each."""
    from evaluator.hardware import device_name
    from fake_llm_server import FakeLLMServer, Reply
    from kforge.trace import trace_lines
    from pipeline.archive import ArchiveConfig
    from pipeline.llm import LLMSettings, OpenAIChat
    from pipeline.loop import Loop, RunConfig

    board = (device_name("cpu"), "small")
    with Database(f"sqlite:///{tmp_path / 'kforge.db'}") as db:
        p = resolve_problem("relu")
        db.upsert_problem(p.name, p.meta.level, str(p.path), p.sha256)
        elites = {}
        for name, cell, speedup in (("x", "plain|1-1.5", 1.2), ("y", "fusion|1.5-2", 1.8)):
            sha = _solution(db, "relu", name, "coder")
            db.add_evaluation(sha, status="correct", cause="correct", device="cpu", device_name=board[0], size=board[1],
                              candidate_ms=1.0, reference_ms=speedup, speedup=speedup)
            db.place_elite("relu", *board, 0, cell, sha, speedup)
            elites[call(db, "relu", sha, 0)] = sha
        cut = Reply(content="```python\nimport torch\nsrc = r\"\"\"\n", finish_reason="length")
        with FakeLLMServer([cut]) as server:
            provider = OpenAIChat(LLMSettings(base_url=server.url, api_key="k", model="m"))
            config = RunConfig(turns=2, out_dir=tmp_path / "out", archive=ArchiveConfig(islands=1, crossover=1.0))
            Loop(provider, db, settings, config, run_id=db.start_run({})).run(p)
        (line,) = [ln for ln in trace_lines(db) if ln["prompt_kind"] == "crossover"]
        assert sorted(line["parent_generation_ids"]) == sorted(elites)
        assert line["parent_generation_id"] == line["parent_generation_ids"][0]
        root = write_report(db, tmp_path / "report").parent
    html = (root / "lineage/relu.html").read_text()
    chart = _charts(root / "lineage/relu.html")[0]
    dots = _dots(chart)
    edges = {((float(e["x1"]), float(e["y1"])), (float(e["x2"]), float(e["y2"]))) for e in _elements(chart, "line", "edge")}
    child = line["generation_id"]
    assert edges == {(_xy(dots[parent]), _xy(dots[child])) for parent in elites}
    row = re.search(rf'<tr id="call-{child}">(.*?)</tr>', html, re.S).group(1)
    assert all(f'href="#call-{parent}"' in row for parent in elites)
