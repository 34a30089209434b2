"""The `kforge` command as users run it: real subprocesses, a real SQLite file, one-line errors for bad input."""

from __future__ import annotations

import json
import shutil
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch

from conftest import SOLUTIONS, kforge_runner
from db import Database

TRUNCATED = SOLUTIONS / "matmul_maxpool_sum_scale/seed_003_0cc791c157c69bb6.py"


@pytest.fixture
def kforge(tmp_path, build_root):
    """Run `python -m kforge ...` with its own HOME, db and the session's build cache."""
    return kforge_runner(tmp_path, build_root)


def _rows(url: str) -> int:
    return len(Database(url).evaluations())


def test_submit_stores_once_and_reuses(kforge):
    first = json.loads(kforge("submit", str(TRUNCATED), "--json").stdout)
    assert first["status"] == "truncated" and first["problem"] == "matmul_maxpool_sum_scale" and not first["reused"]
    assert first["speedup"] is None and len(first["solution_sha256"]) == 64
    again = json.loads(kforge("submit", str(TRUNCATED), "--json").stdout)
    assert again["reused"] and again["evaluation_id"] == first["evaluation_id"]
    (stored,) = Database(kforge.db_url).evaluations()
    assert again["reused_from"] == {"evaluation_id": stored.id, "stored_at": stored.created_at.isoformat(),
                                    "solution_sha256": first["solution_sha256"]} and first["reused_from"] is None
    rerun = json.loads(kforge("submit", str(TRUNCATED), "--json", "--rerun").stdout)
    assert not rerun["reused"] and rerun["evaluation_id"] != first["evaluation_id"]
    assert _rows(kforge.db_url) == 2


def test_a_run_outside_a_terminal_says_each_verdict_and_what_it_took_back(kforge):
    """Piped or logged, a batch prints a line per verdict as it comes (a progress bar would print nothing), and a
    verdict taken back from the db is said to be one."""
    first = kforge("submit", str(TRUNCATED)).stderr
    assert f"kforge: [1/1] matmul_maxpool_sum_scale {TRUNCATED.name}: truncated (" in first, first
    again = kforge("submit", str(TRUNCATED))
    assert "kforge: 1 stored verdict(s) of unchanged code on this device taken back" in again.stderr
    assert "[1/1]" not in again.stderr
    (stored,) = Database(kforge.db_url).evaluations()
    assert f"[1] reused: stored verdict #{stored.id} of {stored.created_at:%Y-%m-%d %H:%M:%S} UTC: " in again.stdout


@pytest.mark.parametrize("args, message", [
    (["submit", str(SOLUTIONS.parent / "pyproject.toml")], "not a Python file"),
    (["submit", "nowhere.py"], "no such file"),
    (["submit", str(TRUNCATED), "--problem", "no_such_problem"], "unknown problem 'no_such_problem'"),
    (["submit", str(SOLUTIONS / "conv1d/seed_002_af9917cd8bead545.py"), "--db", "sqlite:////nonexistent/dir/k.db"], "cannot open database"),
    (["leaderboard", "--db", "notaurl"], "invalid database URL"),
    (["evaluate", "no_such_dir"], "no such directory"),
    (["evaluate", str(TRUNCATED)], f"{TRUNCATED} is a file: evaluate judges the .py files of a folder (kforge submit "),
    (["submit", str(TRUNCATED.parent)], f"{TRUNCATED.parent} is a folder: submit judges one file (kforge evaluate "),
    (["leaderboard", "--db", "postgresql+psycopg://kforge@127.0.0.1:1/kforge"],  # no server on port 1
     "cannot open database 'postgresql+psycopg://kforge@127.0.0.1:1/kforge'" if find_spec("psycopg") else
     "the postgres extra installs psycopg, for postgresql+psycopg:// URLs: KFORGE_EXTRAS=dev,postgres bash "
     "scripts/setup.sh, or pip install -e '.[postgres]'"),
])
def test_bad_input_is_one_line_and_loses_nothing(kforge, args, message):
    kforge("submit", str(TRUNCATED))
    before = _rows(kforge.db_url)
    proc = kforge(*args, expect=2)
    assert message in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert _rows(kforge.db_url) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible here")
@pytest.mark.parametrize("env, args", [({}, ["--device", "cuda"]), ({"KFORGE_DEVICE": "cuda"}, [])])
def test_bad_input_cuda_without_a_cuda_device(tmp_path, build_root, env, args):
    kforge = kforge_runner(tmp_path, build_root, **env)
    for command in (["submit", str(TRUNCATED)], ["evaluate", str(TRUNCATED.parent)]):
        proc = kforge(*command, *args, expect=2)
        assert proc.stderr == "kforge: error: device cuda, but torch sees no CUDA device here (use --device cpu)\n"
    assert not Path(kforge.db_url.removeprefix("sqlite:///")).exists()  # refused before any db was opened


def test_prose_in_a_py_file_is_refused_and_nothing_is_stored(kforge, tmp_path):
    prose = tmp_path / "answer.py"
    prose.write_text("Here is the kernel you asked for. It's fast, and it's correct.\n")
    said = kforge("submit", str(prose), "--problem", "relu", expect=2).stderr
    assert said.startswith("kforge: error: answer.py: no line of Python code (prose?)") and len(said.splitlines()) == 1
    assert not (tmp_path / "k.db").exists() or _rows(kforge.db_url) == 0


def test_non_python_bytes_and_missing_model_new(kforge, tmp_path):
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    assert "not UTF-8" in kforge("submit", str(binary), "-p", "relu", expect=2).stderr
    plain = tmp_path / "plain.py"
    plain.write_text("import torch\n")
    assert "no ModelNew" in kforge("submit", str(plain), "-p", "relu", expect=2).stderr


def test_problem_file_without_model_is_rejected(kforge, tmp_path):
    bad = tmp_path / "bad_problem.py"
    bad.write_text("def get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n")
    proc = kforge("submit", str(TRUNCATED), "--problem", str(bad), expect=2)
    assert "lacks Model" in proc.stderr


def test_problem_can_be_any_kernelbench_file(kforge, tmp_path):
    src = SOLUTIONS.parent / "reference_problems/relu.py"
    shutil.copy(src, tmp_path / "my_relu.py")
    out = json.loads(kforge("submit", str(TRUNCATED), "--problem", str(tmp_path / "my_relu.py"), "--json").stdout)
    assert out["problem"] == "relu"  # the file's KFORGE_META names it


def test_evaluate_directory_and_leaderboard(kforge, tmp_path):
    """A solutions-style tree: a compiled correct kernel, a wrong one, a truncated seed; then the leaderboard."""
    tree = tmp_path / "sols"
    for rel in ("scale_bias_hardswish/cpu_fused_o3", "scale_bias_hardswish/cpu_wrong", "matmul_maxpool_sum_scale/seed_003_0cc791c157c69bb6"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        for suffix in (".py", ".json"):
            shutil.copy(SOLUTIONS / (rel + suffix), tree / (rel + suffix))
    lines = [json.loads(ln) for ln in kforge("evaluate", str(tree), "--device", "cpu", "--json").stdout.splitlines()]
    status = {Path(ln["path"]).stem: ln["status"] for ln in lines}
    assert status == {"cpu_fused_o3": "correct", "cpu_wrong": "incorrect", "seed_003_0cc791c157c69bb6": "truncated"}
    board = json.loads(kforge("leaderboard", "--json").stdout)
    best = {row["problem"]: row for row in board["problems"]}
    correct = next(ln for ln in lines if ln["status"] == "correct")
    assert best["scale_bias_hardswish"]["best_speedup"] == pytest.approx(correct["speedup"])
    assert best["scale_bias_hardswish"]["solutions_by_status"] == {"correct": 1, "incorrect": 1}
    assert set(board["fast_p"]) == {"0.0", "1.0", "1.5", "2.0"} and board["fast_p"]["0.0"] == pytest.approx(1 / 3) and board["samples"] == 3
    table = kforge("leaderboard").stdout
    assert "scale_bias_hardswish" in table and "fast_1=" in table and correct["solution_sha256"][:12] in table
    shown = kforge("show", correct["solution_sha256"][:12]).stdout
    assert "correct" in shown and "\nmax_abs_err: " in shown and f"[{correct['solution_sha256'][:12]}]" in shown
    assert "\\u" not in shown and '"stage":' not in shown  # lines to read, not escaped JSON
    ambiguous = kforge("show", "", expect=2).stderr  # the empty prefix matches all three
    assert ambiguous.startswith("kforge: error: '' matches 3 solutions:") and len(ambiguous.splitlines()) == 1


def test_help_starts_without_torch_sqlalchemy_or_openai():
    """`kforge --help` (and every command's import) stays light: the heavy packages load in the commands that use them."""
    import subprocess
    import sys

    code = ("import sys\nsys.argv = ['kforge', '--help']\nfrom kforge.cli import main\ntry:\n    main()\nexcept SystemExit:\n"
            "    pass\nprint(sorted(m for m in ('torch', 'sqlalchemy', 'openai', 'jinja2') if m in sys.modules), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr
    assert "generate" in proc.stdout and "doctor" in proc.stdout


def test_version_prints_one_line():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "kforge", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("kforge ") and len(proc.stdout.splitlines()) == 1


def test_a_new_sqlite_file_is_announced_once(kforge, tmp_path):
    """A mistyped --db path would otherwise quietly start an empty leaderboard."""
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    first, second = kforge("leaderboard", "--db", url), kforge("leaderboard", "--db", url)
    assert first.stderr.strip() == f"kforge: new database {url}" and second.stderr == ""


def test_ctrl_c_shows_what_finished_says_what_did_not_and_exits_130(kforge, tmp_path):
    """One of two candidates is judged (whichever runs first: a fast kernel, or a hang that times out), the other
    is not when Ctrl-C comes: the finished row is printed and stored, the other is named as not judged."""
    import signal
    import subprocess
    import sys
    import time

    tree = tmp_path / "sols" / "scale_bias_hardswish"
    tree.mkdir(parents=True)
    shutil.copy(SOLUTIONS / "scale_bias_hardswish" / "cpu_fused_o3.py", tree)
    shutil.copy(Path(__file__).parent / "candidates" / "scale_bias_hardswish" / "py_timeout.py", tree)
    proc = subprocess.Popen([sys.executable, "-m", "kforge", "evaluate", str(tree.parent), "--device", "cpu"],
                            env=kforge.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline, stored = time.monotonic() + 600, []
    while time.monotonic() < deadline and proc.poll() is None and not stored:
        time.sleep(1)
        with Database(kforge.db_url) as db:
            stored = db.evaluations()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and len(stored) == 1, out + err
    finished = Path(stored[0].solution_path).name
    other = ({"cpu_fused_o3.py", "py_timeout.py"} - {finished}).pop()
    assert finished in out and stored[0].status in out and other not in out, out
    assert "1 not judged (interrupted)" in err and "Traceback" not in err, err


def test_the_prompt_states_the_sizes_the_kernel_will_be_judged_at(kforge):
    """CPU kernels are judged at the problem's small sizes: the prompt must say so rather than promise fixed ones."""
    cpu = kforge("prompt", "conv1d", "--target", "cpu").stdout
    assert "length = 2048" in cpu and "fixed as given" not in cpu
    cuda = kforge("prompt", "conv1d").stdout
    assert "fixed as given" in cuda and "length = 2048" not in cuda
    assert kforge("prompt", "conv1d", "--target", "tpu", expect=2).stderr.startswith("kforge: error: --target")
