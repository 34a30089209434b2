"""What `kforge` says about paths it is given and command lines it cannot parse, run as users run it (`python -m
kforge`, a real SQLite file): a path a command cannot take, or a usage error, is one line and exit 2, never a
traceback, and every message says what is really there."""

from __future__ import annotations

import pytest

from conftest import SOLUTIONS, kforge_runner
from db import Database

ROOT = SOLUTIONS.parent
README = ROOT / "README.md"
SHA = "bbf5e6b755e8" + "0" * 52  # starts with a letter: `[bbf5e6b755e8]` reads as a markup tag to rich


@pytest.fixture
def kforge(tmp_path, build_root):
    kforge = kforge_runner(tmp_path, build_root, KFORGE_PROBLEMS_DIR=str(tmp_path / "problems"))
    with Database(kforge.db_url) as db:
        db.upsert_problem("relu", 1, str(tmp_path / "relu.py"), "r")
        db.upsert_solution(SHA, "relu", "source", path="solutions/relu/fast.py")
        db.add_evaluation(SHA, status="correct", device="cpu", device_name="EPYC", size="small", speedup=1.5)
    return kforge


def one_line(proc) -> str:
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.removeprefix("kforge: error: ").rstrip("\n")


@pytest.mark.parametrize("args, said", [
    (["report", "--html", str(README)], f"--html {README}: is a file; name a folder (made if missing)"),
    (["report", "--html", "/proc/nope"], "--html /proc/nope: cannot write: No such file or directory"),
    (["export", "--jsonl", str(ROOT)], f"--jsonl {ROOT}: is a folder; name a file to write"),
    (["export", "--trace", str(ROOT)], f"--trace {ROOT}: is a folder; name a file to write"),
    (["export", "--jsonl", f"{README}/out.jsonl"], f"--jsonl {README}/out.jsonl: cannot write: Not a directory"),
    (["import", "/proc/self/mem"], "/proc/self/mem: cannot read it: Input/output error"),
    (["import", str(ROOT)], f"{ROOT}: is a folder; name a file that `kforge export --jsonl` wrote"),
    (["generate", "--problem", "relu", "--replay", str(ROOT / "recordings" / "seeds"), "--device", "cpu",
      "--out", str(README)], f"--out {README}: is a file; name a folder (made if missing)"),
    (["problems", "import", str(README)],
     f"{README}: is a file, not a folder (name a KernelBench checkout or one of its levelN folders)"),
    (["problems", "import", str(ROOT / "docs")],
     f"{ROOT / 'docs'}: no levelN/*.py file under it (name a KernelBench checkout or one of its levelN folders)"),
])
def test_a_path_a_command_cannot_take_is_one_line(kforge, args, said):
    before = Database(kforge.db_url).evaluations()
    assert one_line(kforge(*args, expect=2)) == said
    assert Database(kforge.db_url).evaluations() == before


def test_a_file_to_import_that_is_not_text_is_one_line(kforge, tmp_path):
    binary = tmp_path / "results.jsonl"
    binary.write_bytes(b'\xff\xfe\n')
    assert one_line(kforge("import", str(binary), expect=2)) == f"{binary}: not UTF-8 text (an export is JSON lines)"


def test_report_and_export_still_write_where_they_can(kforge, tmp_path):
    kforge("report", "--html", str(tmp_path / "new" / "report"))
    assert (tmp_path / "new" / "report" / "index.html").is_file()
    kforge("export", "--jsonl", str(tmp_path / "out.jsonl"))
    assert '"kind": "evaluation"' in (tmp_path / "out.jsonl").read_text()


def test_show_prints_a_sha_that_starts_with_a_letter_in_its_header(kforge):
    shown = kforge("show", SHA[:6]).stdout
    assert f"relu fast.py [{SHA[:12]}] on EPYC (small)" in shown, shown


def test_leaderboard_takes_one_of_json_and_csv(kforge):
    assert one_line(kforge("leaderboard", "--csv", "--json", expect=2)) == "--json and --csv: give one"


def test_show_names_the_device_of_a_title_too_long_for_its_rule(kforge):
    long_name = "a_candidate_whose_file_name_takes_up_most_of_a_terminal_line.py"
    sha = "cd" * 32
    with Database(kforge.db_url) as db:
        db.upsert_solution(sha, "relu", "source", path=f"solutions/relu/{long_name}")
        db.add_evaluation(sha, status="correct", device="cpu", device_name="EPYC", size="small", speedup=1.2)
    kforge.env["COLUMNS"] = "80"
    lines = kforge("show", sha[:8]).stdout.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in "".join(lines[:3]), lines
    assert " ".join(" ".join(lines[1:3]).split()) == f"#2 relu {long_name} [{sha[:12]}] on EPYC (small)", lines


def test_evaluate_names_a_folder_with_brackets_as_it_is(kforge, tmp_path):
    """Rich reads `[/red]` in a path as a closing tag: printed as markup, the path was a traceback."""
    folder = tmp_path / "sols" / "[" / "red]"
    folder.mkdir(parents=True)
    (folder / "fast.py").write_text("class ModelNew:\n    pass\n")
    kforge.env["COLUMNS"] = "80"
    said = kforge("evaluate", str(tmp_path / "sols"), "--device", "cpu", expect=2).stderr.splitlines()
    assert said == [f"kforge: skipping {folder / 'fast.py'}: folder 'red]' is no registered problem (use --problem)",
                    f"kforge: error: no candidate .py files under {tmp_path / 'sols'}"]


def test_problems_of_a_level_with_none_says_so(kforge):
    assert kforge("problems", "--level", "9").stdout == "no registered problem of level 9\n"


def test_export_and_import_count_in_the_file_s_order_and_in_number(kforge, tmp_path):
    dump = tmp_path / "out.jsonl"
    assert kforge("export", "--jsonl", str(dump)).stderr == "exported 1 problem, 1 solution, 1 evaluation\n"
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert kforge("import", str(dump), "--db", other).stdout == "1 problem added, 1 solution added, 1 evaluation added\n"


@pytest.mark.parametrize("args, said", [
    (["submit"], "kforge submit: missing argument 'file' (kforge submit --help)"),
    (["problems", "import"], "kforge problems import: missing argument 'path' (kforge problems import --help)"),
    (["leaderboard", "--bogus"], "kforge leaderboard: no such option: --bogus (kforge leaderboard --help)"),
    (["--bogus"], "kforge: no such option: --bogus (kforge --help)"),
    (["leaderbord"], "kforge: no such command 'leaderbord'. Did you mean 'leaderboard'?"),
    (["prompt", "relu", "--target", "tpu"],  # a bad choice: kforge's choices are checked by kforge, not by click
     "kforge: error: --target must be cuda, cpu or triton, not 'tpu'"),
])
def test_a_usage_error_is_one_line_at_80_columns(kforge, args, said):
    """Click says these in four lines (usage, hint, blank, error); a newcomer at 80 columns reads one, exit 2."""
    kforge.env["COLUMNS"] = "80"
    proc = kforge(*args, expect=2)
    assert proc.stderr == f"{said}\n" and len(said) <= 80 and not proc.stdout


def test_a_usage_error_names_the_help_only_where_the_line_has_room(kforge):
    """The error is never cut: past the terminal's width the pointer to --help goes, and the line stays one."""
    said = "kforge evaluate: invalid value for '--jobs' / '-j': Input should be greater than or equal to 1"
    kforge.env["COLUMNS"] = "80"
    assert kforge("evaluate", "solutions", "-j", "0", expect=2).stderr == f"{said}\n"
    kforge.env["COLUMNS"] = "200"
    assert kforge("evaluate", "solutions", "-j", "0", expect=2).stderr == f"{said} (kforge evaluate --help)\n"


def test_kforge_alone_still_prints_its_help(kforge):
    """Click raises the help of a bare `kforge` as a usage error too: it is the whole help, not one line of it."""
    said = kforge(expect=2).stderr
    assert said.startswith("Usage: ") and "Commands:" in said and "  submit " in said, said
