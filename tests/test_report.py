"""HTML report, JSONL export/import, KernelBench problem import and speed of light, against real SQLite files
filled through the db API (no evaluator runs; test_report_browser.py loads the report in headless Chromium). The
report's speed of light is what the stored verdicts hold: it starts no child."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from db import Database
from evaluator.contracts import Evidence, SpeedOfLight, TimingReport
from evaluator.parent.introspect import introspect
from evaluator.sandbox import spawn
from kforge import cli
from kforge.cli_report import register
from kforge.report import histogram_chart, page_of, write_report
from kforge.speed_of_light import Cost, achieved
from kforge.transfer import TransferError, export_jsonl, import_jsonl
from reference_problems import import_problems, list_problems, resolve_problem
from reference_problems.registry import PROBLEM_DIR

H100 = "NVIDIA H100 80GB HBM3"
T0 = datetime(2025, 3, 1, 12, tzinfo=UTC)
SCRIPT = '<script>alert("pwned")</script>'
EXTERNAL = re.compile(r"""(?:(?:src|href|action)\s*=|url\()\s*["']?\s*(?:[a-z]+:)?//""", re.I)  # also //host/x

KERNELBENCH_FILE = """\
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(256, 128)

    def forward(self, x):
        return torch.relu(self.fc(x))

batch_size = 64

def get_inputs():
    return [torch.randn(batch_size, 256)]

def get_init_inputs():
    return []
"""


def _timing(median: float) -> dict:
    return {"median_ms": median, "mean_ms": median * 1.01, "min_ms": median * 0.98, "max_ms": median * 1.1,
            "p20_ms": median * 0.99, "p80_ms": median * 1.02,
            "std_ms": median * 0.02, "cv": 0.02, "reps": 200, "method": "cuda_events+l2_flush"}  # fmt: skip


def _solution(db: Database, problem: str, name: str, model: str, parent: str | None = None, origin: str = "generated") -> str:
    sha = f"{problem}-{name}".ljust(64, "0")
    source = f"# {name}\nimport torch\n{SCRIPT if name == 'seed' else ''}\nclass ModelNew(torch.nn.Module):\n    pass\n"
    db.upsert_solution(sha, problem, source, path=f"solutions/{problem}/{name}.py", origin=origin, model=model,
                       parent_sha256=parent)  # fmt: skip
    return sha


def _declared(problem: str) -> SpeedOfLight:
    """The speed of light a verdict of the problem at full size stores: the figures it was worked out from."""
    meta = resolve_problem(problem).meta
    return SpeedOfLight(ms=0.5, bound="bandwidth", arithmetic="", hardware="", bytes_moved=meta.bytes_moved, flops=meta.flops)


def _correct(db: Database, sha: str, cand_ms: float, ref_ms: float, *, device_name: str = H100, size: str = "full",
             minutes: int = 0, sol: SpeedOfLight | None = None) -> None:
    timing = TimingReport(method="cuda_events+l2_flush", calls=200, speed_of_light=sol)
    evidence = Evidence(cause="correct", max_abs_err=1e-6, compile_s=41.5, cache_hit=False, timing=timing)
    db.add_evaluation(sha, status="correct", cause=f"correct in 3 trials; {ref_ms / cand_ms:.3g}x vs eager",
                      evidence=evidence.model_dump(mode="json"),
                      device="cpu" if device_name == "cpu" else "cuda", device_name=device_name, size=size,
                      candidate_ms=cand_ms, candidate_std_ms=cand_ms * 0.02, reference_ms=ref_ms,
                      compiled_reference_ms=ref_ms * 0.9, speedup=ref_ms / cand_ms,
                      speedup_vs_compile=ref_ms * 0.9 / cand_ms, torch_version="2.5.1", cuda_version="12.4",
                      timings={"candidate": _timing(cand_ms), "reference": _timing(ref_ms)}, wall_s=60.0,
                      created_at=T0 + timedelta(minutes=minutes))  # fmt: skip


def call(db: Database, problem: str, sha: str | None, turn: int, parent: int | None = None, **fields) -> int:
    """A stored LLM call whose answer is solution sha, as the agent stores them."""
    return db.add_generation(problem=problem, solution_sha256=sha, request_hash=f"{problem}-{turn}-{sha}",
                             provider="openai", model="gpt-4o", prompt=[], response="", turn=turn,
                             prompt_kind="refine" if parent else "draft", parent_generation_id=parent, **fields)


def fill(db: Database) -> dict[str, str]:
    """relu: a seed that fails to compile, refined into a 2.5x kernel (two LLM calls); softmax: a wrong and a 1.3x
    one, whose verdict holds no speed of light; matmul: 0.8x on the H100 and 1.1x on the CPU at the small size."""
    for problem in ("relu", "softmax", "matmul"):
        p = resolve_problem(problem)
        db.upsert_problem(p.name, p.meta.level, str(p.path), p.sha256)
    s = {"seed": _solution(db, "relu", "seed", "gpt-4o", origin="seed")}
    s["repair"] = _solution(db, "relu", "repair", "gpt-4o", parent=s["seed"], origin="repair")
    s["wrong"] = _solution(db, "softmax", "wrong", "claude-sonnet")
    s["online"] = _solution(db, "softmax", "online", "claude-sonnet")
    s["tiled"] = _solution(db, "matmul", "tiled", "claude-sonnet")
    db.add_evaluation(s["seed"], status="compile_error", cause="compiling the extension failed",
                      evidence={"stage": "compile", "hint": "include <ATen/cuda/CUDAContext.h>",
                                "log_tail": "kernel.cu(12): error: identifier \"getCurrentCUDAStream\" is undefined <&>"},
                      device="cuda", device_name=H100, created_at=T0)  # fmt: skip
    _correct(db, s["repair"], 1.0, 2.5, minutes=1, sol=_declared("relu"))  # 2^31 bytes in 1 ms = 64.1% of 3.35 TB/s
    db.add_evaluation(s["wrong"], status="incorrect", cause="max abs err 0.5 > atol",
                      evidence={"stage": "correctness", "mismatch": {"trial": 0, "max_abs_err": 0.5, "max_rel_err": 2.0,
                                "worst_index": [3, 17], "expected": 0.25, "got": 0.75, "bad_fraction": 0.125}},
                      device="cuda", device_name=H100, created_at=T0 + timedelta(minutes=2))  # fmt: skip
    _correct(db, s["online"], 4.0, 5.2, minutes=3)
    _correct(db, s["tiled"], 10.0, 8.0, minutes=4, sol=_declared("matmul"))
    _correct(db, s["tiled"], 2.0, 2.2, device_name="cpu", size="small", minutes=5)
    call(db, "relu", s["repair"], 1, call(db, "relu", s["seed"], 0))
    return s


MODEL = "Qwen/Qwen2.5-Coder-32B-Instruct"
AGENT_PROBLEM = "92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp"  # KernelBench level 2: a long name
SYSTEM = {"role": "system", "content": "You write fast CUDA kernels."}
TASK = {"role": "user", "content": "Optimize this model: class Model(nn.Module) ..."}
BUILD_ERROR = 'kernel.cu(41): error: no instance of overloaded function "atomicAdd" matches the argument list'
NO_CODE_REPLY = "The kernel above is already optimal; I would keep it as it is."


def _kernel(db: Database, problem: str, body: str, parent: str | None = None) -> str:
    """A candidate the agent wrote: its file is named by its SHA, as the loop names the files it writes."""
    source = f"import torch\nclass ModelNew(torch.nn.Module):\n    pass  # {body}\n"
    sha = hashlib.sha256(source.encode()).hexdigest()
    db.upsert_solution(sha, problem, source, path=f"/tmp/kforge-out/{problem}/{sha}.py", model=MODEL,
                       origin="repair" if parent else "generated", parent_sha256=parent)  # fmt: skip
    return sha


def _ask(db: Database, problem: str, sha: str | None, turn: int, parents: list[int], prompt: list[dict], reply: str,
         kind: str = "refine", **fields) -> int:  # fmt: skip
    return db.add_generation(problem=problem, solution_sha256=sha, request_hash=f"{problem}-{turn}-{kind}",
                             provider="openai", model=MODEL, prompt=prompt, response=reply, turn=turn,
                             prompt_kind=kind, parent_generation_ids=parents, prompt_tokens=900, completion_tokens=300,
                             **fields)  # fmt: skip


def generated_run(db: Database) -> dict[str, str | int]:
    """An agent's run on a KernelBench problem with a long name (files named by their SHA): a draft that fails to
    build, its repair at 3.2x, a refinement at 0.0064x, a crossover of the two that is wrong and a reply with no code;
    a submitted file on scale_bias_hardswish that failed to build three times (reruns); conv1d: skipped only."""
    for level, problem in ((2, AGENT_PROBLEM), (2, "scale_bias_hardswish"), (1, "conv1d")):
        db.upsert_problem(problem, level, f"reference_problems/{problem}.py", problem.ljust(64, "0"))
    p, ids = AGENT_PROBLEM, {}
    ids["draft"] = _kernel(db, p, "draft")
    ids["fast"] = _kernel(db, p, "fast", ids["draft"])
    ids["slow"] = _kernel(db, p, "slow", ids["fast"])
    ids["wrong"] = _kernel(db, p, "wrong", ids["fast"])
    db.add_evaluation(ids["draft"], status="compile_error", cause="compiling the extension failed", device="cuda",
                      device_name=H100, evidence={"stage": "compile", "hint": "cast the operand to float*",
                                                  "log_tail": BUILD_ERROR})  # fmt: skip
    _correct(db, ids["fast"], 1.0, 3.2, minutes=1, sol=SpeedOfLight(ms=0.2, bound="bandwidth", arithmetic="",
                                                                     hardware="", bytes_moved=2**31))  # fmt: skip
    _correct(db, ids["slow"], 500.0, 3.2, minutes=2)
    db.add_evaluation(ids["wrong"], status="incorrect", cause="max abs err 0.5 > atol", device="cuda",
                      device_name=H100, evidence={"stage": "correctness"}, created_at=T0 + timedelta(minutes=3))
    run = db.start_run({})
    answer = {"role": "assistant", "content": "```python\n...\n```"}
    said = {"role": "user", "content": f"Your previous candidate was evaluated: compile_error.\n{BUILD_ERROR}"}
    ids["g_draft"] = _ask(db, p, ids["draft"], 0, [], [SYSTEM, TASK], "```python\n# draft\n```", "draft", run_id=run)
    ids["g_fast"] = _ask(db, p, ids["fast"], 1, [ids["g_draft"]], [SYSTEM, TASK, answer, said], "fixed", run_id=run)
    ids["g_slow"] = _ask(db, p, ids["slow"], 2, [ids["g_fast"]], [SYSTEM, TASK], "slower", run_id=run)
    ids["g_wrong"] = _ask(db, p, ids["wrong"], 3, [ids["g_fast"], ids["g_slow"]], [SYSTEM, TASK], "mixed",
                          "crossover", run_id=run)  # fmt: skip
    ids["g_none"] = _ask(db, p, None, 4, [ids["g_wrong"]], [SYSTEM, TASK], NO_CODE_REPLY, run_id=run,
                         extraction_status="no_code")  # fmt: skip
    ids["file"] = "solutions/scale_bias_hardswish/fused_hardswish_vectorized_float4.py"
    ids["rerun"] = hashlib.sha256(b"rerun").hexdigest()
    db.upsert_solution(ids["rerun"], "scale_bias_hardswish", "import torch\n", path=ids["file"])
    for minute in range(3):
        db.add_evaluation(ids["rerun"], status="compile_error", cause="failed", device="cuda", device_name=H100,
                          created_at=T0 + timedelta(minutes=10 + minute))  # fmt: skip
    db.upsert_solution(hashlib.sha256(b"skipped").hexdigest(), "conv1d", "import torch\n", path="solutions/conv1d/k.py")
    db.add_evaluation(hashlib.sha256(b"skipped").hexdigest(), status="skipped", cause="no CUDA device", device="cuda",
                      device_name=H100)  # fmt: skip
    return ids


@pytest.fixture
def generated(tmp_path: Path) -> tuple[Path, dict[str, str | int]]:
    """The report of generated_run: its root and the ids of what it stored."""
    with Database(f"sqlite:///{tmp_path / 'generated.db'}") as db:
        ids = generated_run(db)
        return write_report(db, tmp_path / "generated").parent, ids


@pytest.fixture
def filled(tmp_path: Path) -> tuple[Database, dict[str, str]]:
    with Database(f"sqlite:///{tmp_path / 'kforge.db'}") as db:
        yield db, fill(db)


@pytest.fixture
def report(filled, tmp_path: Path) -> Path:
    return write_report(filled[0], tmp_path / "report")


def _hrefs(page: Path) -> list[str]:
    return re.findall(r'href="([^"]+)"', page.read_text())


# -- report --------------------------------------------------------------------------------------


def test_index_shows_boards_speedups_and_speed_of_light(report: Path) -> None:
    html = report.read_text()
    assert html.count("<svg") == 4  # fast_p curve and histogram on each of the two boards
    assert html.index(H100) < html.index(">cpu <")  # the full-size board comes first
    assert "2.5x" in html and "1.3x" in html and "0.8x" in html  # best per problem vs eager
    assert "2.25x" in html  # relu vs torch.compile: 2.5 * 0.9 / 1.0
    assert "2.15 TB/s (64.1%)" in html  # relu: achieved bandwidth and its fraction of the H100's peak
    assert "13.7 TFLOP/s (20.5%)" in html  # matmul: 2*4096^3 FLOPs in 10 ms
    assert "compile_error 1" in html and "incorrect 1" in html
    assert "gpt-4o" in html and "claude-sonnet" in html
    assert "<script>" in html and "dataset.ready" in html  # the page's own script


def test_every_candidate_has_a_page_and_links_resolve(filled, report: Path) -> None:
    db, s = filled
    pages = sorted((report.parent / "candidates").glob("*.html"))
    assert [p.relative_to(report.parent).as_posix() for p in pages] == sorted(page_of(sha) for sha in s.values())
    lineages = sorted((report.parent / "lineage").glob("*.html"))
    assert [p.name for p in lineages] == ["relu.html"]  # the one problem with LLM calls
    for page in [report, *pages, *lineages]:
        text = page.read_text()
        assert not EXTERNAL.search(text) and "http://" not in text and "https://" not in text, page
        for href in _hrefs(page):
            if not href.startswith(("data:", "#")):
                assert (page.parent / href).resolve().is_file(), f"{page.name}: {href}"
    relu = [report.parent / page_of(sha) for sha in s.values() if db.get_solution(sha).problem == "relu"]
    assert relu and all('href="../lineage/relu.html"' in page.read_text() for page in relu)  # back to the lineage
    assert all("lineage/" not in page.read_text() for page in pages if page not in relu)


def test_candidate_page_has_source_evidence_and_lineage(filled, report: Path) -> None:
    _, s = filled
    seed = (report.parent / page_of(s["seed"])).read_text()
    assert SCRIPT not in seed and "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in seed  # escaped source
    assert "is undefined &lt;&amp;&gt;" in seed and "hint: include &lt;ATen/cuda/CUDAContext.h&gt;" in seed
    assert f'href="../{page_of(s["repair"])}"' in seed  # parent -> child
    repair = (report.parent / page_of(s["repair"])).read_text()
    assert f'href="../{page_of(s["seed"])}"' in repair  # child -> parent
    assert "median ms" in repair and "cuda_events+l2_flush" in repair and "64.1% of the device" in repair
    wrong = (report.parent / page_of(s["wrong"])).read_text()
    assert "Mismatch" in wrong and "[3, 17]" in wrong and "12.5%" in wrong


def test_empty_database_report(tmp_path: Path) -> None:
    with Database(f"sqlite:///{tmp_path / 'empty.db'}") as db:
        html = write_report(db, tmp_path / "out").read_text()
    assert "No evaluations stored yet" in html and "<svg" not in html


def test_candidates_are_named_by_problem_sha_prefix_and_origin(generated) -> None:
    root, ids = generated
    index = (root / "index.html").read_text()
    assert not re.search(r"[0-9a-f]{64}", index)  # no SHA in full, not even in a link
    fast = f"{AGENT_PROBLEM} · {ids['fast'][:8]} · {MODEL} turn 1"
    assert f'href="{page_of(ids["fast"])}">{fast}</a>' in _row(index, AGENT_PROBLEM)  # best on the board
    assert f"scale_bias_hardswish · {ids['rerun'][:8]} · fused_hardswish_vectorized_float4.py" in index
    lineage = (root / f"lineage/{AGENT_PROBLEM}.html").read_text()
    assert f">{fast}</a>" in lineage and not re.search(r">[0-9a-f]{12}</a>", lineage)
    candidate = (root / page_of(ids["slow"])).read_text()
    assert f"<h1>{AGENT_PROBLEM} · {ids['slow'][:8]} · {MODEL} turn 2</h1>" in candidate
    assert f">{fast}</a>" in candidate  # its parent
    assert f'href="../calls/{ids["g_slow"]}.html">call {ids["g_slow"]}</a>' in candidate  # the call that wrote it


def test_badges_count_each_solution_by_its_latest_verdict(generated) -> None:
    """Three failed builds of one file are one solution failing: 'compile_error 1', the reruns said apart."""
    index = (generated[0] / "index.html").read_text()
    row = _row(index, "scale_bias_hardswish")
    assert ">compile_error 1<" in row and 'title="3 evaluations in all, reruns included"' in row
    assert "solutions by latest verdict" in index
    assert ">correct 2<" in _row(index, AGENT_PROBLEM) and ">skipped 1<" in _row(index, "conv1d")


def test_fast_p_over_problems_leaves_out_problems_only_skipped(generated) -> None:
    """conv1d never ran: of the two judged problems one has a correct kernel faster than eager (3.2x), not 1 of 3."""
    index = (generated[0] / "index.html").read_text()
    stats = re.findall(r'<div class="stat"><b>([^<]+)</b><span>(.*?)</span></div>', index)
    assert [(v, re.sub("<[^>]+>", "", what)) for v, what in stats] == [
        ("50.0%", "problem_fast_0 (best-of-k)"), ("50.0%", "problem_fast_1 (best-of-k)"),
        ("50.0%", "problem_fast_1.5 (best-of-k)"), ("50.0%", "problem_fast_2 (best-of-k)"),
        ("3.2x", "geomean best speedup"), ("2", "problems judged (+1 only skipped)")]  # fmt: skip
    curve = re.search(r'<path class="curve" d="M [\d.]+ ([\d.]+) ', index).group(1)
    assert float(curve) == pytest.approx(12 + (250 - 40 - 12) / 2)  # fast_0 = 0.5: halfway up the plot


def test_a_failed_call_shows_its_prompt_reply_and_feedback(generated) -> None:
    root, ids = generated
    lineage = (root / f"lineage/{AGENT_PROBLEM}.html").read_text()
    assert lineage.count(f'href="../calls/{ids["g_draft"]}.html"') == 2  # its table row and its point
    draft = (root / f"calls/{ids['g_draft']}.html").read_text()
    assert "<b>the task</b>" in draft and "Optimize this model" in draft and "# draft" in draft  # prompt, reply
    feedback = re.search(r"<h2>Feedback on its answer</h2>(.*)", draft, re.S).group(1)
    assert "The build failed" in feedback and "no instance of overloaded function &#34;atomicAdd&#34;" in feedback
    assert "Likely cause: cast the operand to float*" in feedback  # the text a refine prompt shows the model
    assert f'href="../calls/{ids["g_fast"]}.html"' in draft and f'href="../lineage/{AGENT_PROBLEM}.html' in draft
    fast = (root / f"calls/{ids['g_fast']}.html").read_text()
    assert "<b>feedback on the answer above</b>" in fast and "<b>an earlier answer</b>" in fast
    none = (root / f"calls/{ids['g_none']}.html").read_text()
    assert "no code taken from the reply" in none and NO_CODE_REPLY in none and "Nothing to judge" in none


def test_a_call_page_reads_a_verdict_stored_in_an_older_form(tmp_path: Path) -> None:
    """Timings without fields this kforge's verdicts hold: the page still says the cause."""
    with Database(f"sqlite:///{tmp_path / 'old.db'}") as db:
        db.upsert_problem("relu", 1, "relu.py", "r" * 64)
        sha = _solution(db, "relu", "old", "coder")
        db.add_evaluation(sha, status="correct", cause="correct in 3 trials", device="cuda", device_name=H100,
                          speedup=2.0, timings={"candidate": {"median_ms": 1.0}})  # fmt: skip
        gid = call(db, "relu", sha, 0)
        root = write_report(db, tmp_path / "r").parent
    assert "correct in 3 trials" in re.search(r"<h2>Feedback on its answer</h2>(.*)", (root / f"calls/{gid}.html").read_text(), re.S).group(1)


def test_histogram_bins_by_powers_of_two() -> None:
    chart = histogram_chart([0.5, 0.99, 1.0, 2.0, 3.9, 4.0])  # 4.0, the maximum, closes the last bin
    assert [tip for *_, tip in chart.bars] == ["2 in [1/2x, 1x)", "1 in [1x, 2x)", "3 in [2x, 4x)"]
    assert [label for _, label in chart.x_ticks] == ["1/2x", "1x", "2x", "4x"] and chart.marker is not None
    assert [tip for *_, tip in histogram_chart([1.0]).bars] == ["1 in [1x, 2x)"]


# -- export / import -----------------------------------------------------------------------------


def _snapshot(db: Database) -> tuple[list, list, list]:
    return ([p.model_dump(exclude={"id", "created_at"}) for p in db.problems()],
            sorted((s.model_dump(exclude={"id", "created_at"}) for s in db.solutions()), key=lambda s: s["sha256"]),
            [e.model_dump(exclude={"id"}) for e in db.evaluations()])  # fmt: skip


def test_export_import_round_trip_is_idempotent(filled, tmp_path: Path) -> None:
    db, _ = filled
    db.upsert_solution("late-child", "relu", "c")
    db.upsert_solution("late-parent", "relu", "p")
    db.upsert_solution("late-child", "relu", "c", parent_sha256="late-parent")  # stored before its parent
    dump = tmp_path / "kforge.jsonl"
    with dump.open("w") as fh:
        assert export_jsonl(db, fh) == {"problem": 3, "solution": 7, "evaluation": 6}
    with Database(f"sqlite:///{tmp_path / 'other.db'}") as other:
        counts = import_jsonl(other, dump)
        assert counts == {"problems added": 3, "solutions added": 7, "evaluations added": 6}
        assert _snapshot(other) == _snapshot(db)
        again = import_jsonl(other, dump)
        assert again == {"problems already stored": 3, "solutions already stored": 7, "evaluations already stored": 6}
        assert _snapshot(other) == _snapshot(db)
    assert import_jsonl(db, dump)["evaluations already stored"] == 6  # into its own source: nothing new


def test_import_reports_the_bad_line(filled, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "problem", "name": "x", "level": 1, "path": "x.py", "sha256": "h"}\n{"kind": "evaluation"}\n')
    with pytest.raises(TransferError, match=r"bad.jsonl:2: cannot import this record: KeyError"):
        import_jsonl(filled[0], bad)


# -- CLI (kforge's own app, with these commands registered as main() does) -----------


@pytest.fixture
def app() -> typer.Typer:
    register()
    return cli.app


def test_cli_report_export_import(app: typer.Typer, filled, tmp_path: Path) -> None:
    db, _ = filled
    runner = CliRunner()
    res = runner.invoke(app, ["report", "--html", str(tmp_path / "r"), "--db", db.url])
    assert res.exit_code == 0 and (tmp_path / "r/index.html").is_file(), res.output
    res = runner.invoke(app, ["export", "--jsonl", str(tmp_path / "e.jsonl"), "--db", db.url])
    assert res.exit_code == 0, res.output
    other = f"sqlite:///{tmp_path / 'o.db'}"
    res = runner.invoke(app, ["import", str(tmp_path / "e.jsonl"), "--db", other, "--json"])
    assert json.loads(res.stdout)["evaluations added"] == 6 and "new database" in res.stderr
    res = runner.invoke(app, ["import", str(tmp_path / "missing.jsonl"), "--db", other])
    assert res.exit_code == 2 and "no such file" in res.output


def kernelbench_checkout(root: Path) -> Path:
    """KernelBench's layout: KernelBench/levelN/NN_name.py, plus a file that is no problem."""
    for rel in ("level1/1_Linear_ReLU.py", "level2/7_Linear_ReLU_fused.py"):
        (root / "KernelBench" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "KernelBench" / rel).write_text(KERNELBENCH_FILE)
    (root / "KernelBench/level1/2_broken.py").write_text("x = 1\n")
    return root


def test_problems_import(app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "user"
    monkeypatch.setenv("KFORGE_PROBLEMS_DIR", str(user))  # the CLI's, below
    n_reference = len(list_problems(user))
    imported, skipped = import_problems(kernelbench_checkout(tmp_path / "src"), user)
    assert [(p.name, p.meta.level) for p in imported] == [("1_Linear_ReLU", 1), ("7_Linear_ReLU_fused", 2)]
    assert [f.name for f, _ in skipped] == ["2_broken.py"] and "lacks Model" in skipped[0][1]
    assert resolve_problem("7_Linear_ReLU_fused", user).path == tmp_path / "user/level2/7_Linear_ReLU_fused.py"
    assert len(list_problems(user)) == n_reference + 2
    res = CliRunner().invoke(app, ["problems", "import", str(tmp_path / "src"), "--json"])  # again: a no-op
    assert res.exit_code == 0 and len(json.loads(res.output)["imported"]) == 2, res.output
    assert len(list_problems(user)) == n_reference + 2
    listed = json.loads(CliRunner().invoke(app, ["problems", "--json"]).output)
    assert {"1_Linear_ReLU", "avg_pool_1d"} <= {p["name"] for p in listed}


# -- speed of light ------------------------------------------------------------------------------


def _row(html: str, problem: str) -> str:
    return re.search(rf"<tr>\s*<td[^>]*>(?:<a [^>]*>)?{problem}(?:</a>)?</td>.*?</tr>", html, re.S).group(0)


def test_the_report_shows_the_stored_speed_of_light_and_starts_no_child(filled, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The figures come from the stored verdicts; a problem whose verdicts hold none (softmax) shows none, and no
    child is started to count them."""
    def started(*args, **kwargs):
        raise AssertionError("the report started a child process")

    monkeypatch.setattr(subprocess, "Popen", started)
    monkeypatch.setattr(spawn, "Child", started)
    html = write_report(filled[0], tmp_path / "r").read_text()
    assert "2.15 TB/s (64.1%)" in _row(html, "relu") and "13.7 TFLOP/s (20.5%)" in _row(html, "matmul")
    assert "B/s" not in _row(html, "softmax") and "FLOP/s" not in _row(html, "softmax")


def test_speed_of_light_declared_matches_derived(tmp_path: Path) -> None:
    """The hand-counted bytes of every reference problem agree with the shapes the introspect child measures; FLOPs
    where torch counts them."""
    problems = [p for p in list_problems() if p.path.parent == PROBLEM_DIR]  # not the user's imported ones
    found = introspect([p.path for p in problems])
    for p in problems:
        assert found[str(p.path)].bytes_moved == p.meta.bytes_moved, p.name
    for name in ("matmul", "conv1d", "mlp", "matmul_maxpool_sum_scale"):
        assert found[str(resolve_problem(name).path)].flops == resolve_problem(name).meta.flops, name
    assert found[str(resolve_problem("relu").path)].flops is None  # element-wise: FlopCounterMode counts none


def test_speed_of_light_of_a_kernelbench_file_is_derived(tmp_path: Path) -> None:
    kb = kernelbench_checkout(tmp_path) / "KernelBench/level1/1_Linear_ReLU.py"
    x, weight, bias, out = 64 * 256, 256 * 128, 128, 64 * 128
    found = introspect([kb])[str(kb)]
    assert (found.bytes_moved, found.flops) == (4 * (x + weight + bias + out), 2 * 64 * 256 * 128)


def test_achieved_fraction_of_peak() -> None:
    h200 = achieved(Cost(bytes_moved=4_800_000_000, flops=None), 0.002, "NVIDIA H200")
    assert h200.bytes_per_s == pytest.approx(2.4e12) and h200.bandwidth_fraction == pytest.approx(0.5)
    assert h200.flops_per_s is None and h200.flops_fraction is None
    cpu = achieved(Cost(bytes_moved=10**9, flops=10**9), 1.0, "AMD EPYC 9654")
    assert cpu.bytes_per_s == 1e9 and cpu.bandwidth_fraction is None and cpu.flops_fraction is None
