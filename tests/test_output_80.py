"""kforge's output at 80 columns, as a user meets it piped (COLUMNS=80): every help screen and every table fits, no
word is cut, a KernelBench sample takes one line and a long cause is a note under the table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer

from conftest import kforge_runner

KERNELBENCH = Path("/work/shared/kernelbench")
LONGEST = "75_conv_transposed_2D_asymmetric_input_asymmetric_kernel_strided__grouped____padded____dilated__"
CHEAT = '''import torch


class ModelNew(torch.nn.Module):
    """Only PyTorch ops: judged from its code alone, before anything runs."""

    def forward(self, *args):
        return args[0]
'''


def _commands() -> list[tuple[list[str], object]]:
    """Every command and group of kforge, as `main` registers them (generate's options included)."""
    from kforge import cli

    cli.register_commands(generate=True)

    def walk(command, path):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])
    return list(walk(typer.main.get_command(cli.app), []))


def _at_80(run):
    run.env["COLUMNS"] = "80"  # the runner's environment, which each call passes on
    return run


def _fits(text: str) -> list[str]:
    lines = text.splitlines()
    assert lines and max(map(len, lines)) <= 80, "\n".join(line for line in lines if len(line) > 80)
    return lines


def _tokens(lines: list[str]) -> set[str]:
    return {token for line in lines for token in line.split()}


@pytest.fixture
def kforge(tmp_path, build_root):
    """`python -m kforge` piped at 80 columns, with KernelBench's three levels imported into a problems dir of its
    own."""
    run = _at_80(kforge_runner(tmp_path, build_root, KFORGE_PROBLEMS_DIR=str(tmp_path / "problems")))
    if not KERNELBENCH.is_dir():
        pytest.skip(f"no KernelBench checkout at {KERNELBENCH}")
    run.imported = run("problems", "import", str(KERNELBENCH))
    return run


def test_every_help_screen_fits_with_words_whole(tmp_path, build_root):
    """Each option's help, each command's description and each command listed in a group reads whole: no hyphenated
    word split over two lines, no text squeezed into a narrow column, a short help cut only after a whole word, no
    option's value named by a Python type (each option's value is named for what it is: --db URL); generate's
    options under headings."""
    run = _at_80(kforge_runner(tmp_path, build_root))
    commands = _commands()
    assert len(commands) > 15
    for path, command in commands:
        lines = _fits(run(*path, "--help").stdout)
        typed = re.findall(r"<\w+[ \[][^>]*>|--[\w-]+ <\w+>", "\n".join(lines))  # <list[str]>, --db <str>
        assert not typed, (path, typed)
        texts = [command.help or ""] + [getattr(param, "help", None) or "" for param in command.params]
        cut = sorted({word for text in texts for word in text.split()} - _tokens(lines))
        assert not cut, (path, cut, "\n".join(lines))
        for name, sub in getattr(command, "commands", {}).items():
            listed = next(line for line in lines if line.split()[:1] == [name]).split(None, 1)[1]
            words = " ".join((sub.help or "").split())
            assert words.startswith(listed.removesuffix("...")) and words[len(listed.removesuffix("...")):][:1] in " ", \
                (path, name, listed)
    generate = run("generate", "--help").stdout.splitlines()
    assert len(generate) < 80 and {"Answers:", "Judging:", "Search:", "Budget:", "Output:"} <= set(generate)


def test_the_help_screens_checked_are_every_command_kforge_lists(tmp_path, build_root):
    """`_commands` registers them as `main` does: a command `main` adds and `_commands` misses would go unchecked."""
    lines = _at_80(kforge_runner(tmp_path, build_root))("--help").stdout.splitlines()
    listed = {line.split()[0] for line in lines[lines.index("Commands:") + 1:] if line.strip()}
    assert listed == {path[0] for path, _ in _commands() if len(path) == 1}, listed


def test_problems_list_caps_long_names_and_keeps_the_other_columns(kforge):
    _fits(kforge.imported.stdout)
    lines = _fits(kforge("problems").stdout)
    row = next(line for line in lines if line.startswith("75_conv_transposed_2D_asymmetric"))
    assert row.split()[1:] == ["1", "0.0001", "0.0001"] and "…" in row.split()[0], row
    assert LONGEST.startswith(row.split()[0].removesuffix("…"))  # cut after a whole part
    assert any(line.split() == ["19_ReLU", "1", "0.0001", "0.0001"] for line in lines)
    described = next(i for i, line in enumerate(lines) if line.split()[:1] == ["mlp"])
    assert lines[described + 1].startswith("  3-layer MLP")  # a description under its name, at words


@pytest.fixture
def samples(kforge, tmp_path) -> list[dict]:
    """KernelBench samples judged from their code (cheat, no child needed), the 96-character problem's among them."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("level_1_problem_19_sample_0_kernel.py", "level_1_problem_19_sample_1_kernel.py",
                 "level_1_problem_75_sample_0_kernel.py"):
        (run / name).write_text(CHEAT + f"# {name}\n")
    judged = kforge("evaluate", str(run), "--device", "cpu")
    kforge.results = judged.stdout
    return [json.loads(line) for line in kforge("evaluate", str(run), "--device", "cpu", "--json").stdout.splitlines()]


def test_results_give_a_kernelbench_sample_one_line_and_causes_as_notes(kforge, samples):
    lines = _fits(kforge.results)
    for n, line in enumerate(samples, 1):
        sample = re.search(r"sample_(\d+)_kernel", line["path"]).group(1)
        row = next(row for row in lines if row.startswith(f"{n} "))
        problem = row.split()[1]
        assert row.split()[2:6] == ["sample", sample, line["solution_sha256"][:12], "cheat"], row
        assert problem == line["problem"] or (problem.endswith("…") and line["problem"].startswith(problem[:-1])), row
    notes = "\n".join(lines[lines.index(next(ln for ln in lines if ln.startswith("[1] "))):])
    assert not set(samples[0]["cause"].split()) - _tokens(notes.splitlines()), notes  # wrapped at words, whole


def test_leaderboard_and_its_summary_fit(kforge, samples, tmp_path):
    """A board with a correct best on a GPU (imported: this machine has none) beside the CPU's cheats."""
    exported = tmp_path / "export.jsonl"
    kforge("export", "--jsonl", str(exported))
    records = [json.loads(line) for line in exported.read_text().splitlines()]
    gpu = next(r for r in records if r["kind"] == "evaluation" and r["solution_sha256"] == samples[2]["solution_sha256"])
    gpu.update(status="correct", device="cuda", device_name="NVIDIA H100 80GB HBM3", size="full", speedup=1.37,
               candidate_ms=0.25, reference_ms=0.3425)
    exported.write_text("\n".join(map(json.dumps, records)) + "\n")
    kforge("import", str(exported), "--db", f"sqlite:///{tmp_path / 'boards.db'}")
    lines = _fits(kforge("leaderboard", "--db", f"sqlite:///{tmp_path / 'boards.db'}").stdout)
    best = next(line for line in lines if "1.37" in line)
    assert best.split()[:4] == [best.split()[0], "sample", "0", samples[2]["solution_sha256"][:12]], best
    assert best.split()[0].startswith("75_conv_") and "NVIDIA H100" in best, best
    assert {"fast_1=0.33", "(best-of-k)", "geomean"} <= _tokens(lines) and any("80GB HBM3" in line for line in lines)
    assert any(line.startswith("NVIDIA H100 80GB HBM3 full: 1 problem judged") for line in lines), lines


def test_generate_table_names_the_sha_prefix_and_puts_causes_under_it(kforge, tmp_path):
    """One problem answered (from a recording; its code is judged without a child), one with no recording."""
    replay = tmp_path / "replay"
    replay.mkdir()
    (replay / "answer.txt").write_text(f"Here is the kernel:\n```python\n{CHEAT}```\n")
    (replay / "index.json").write_text(json.dumps({LONGEST: ["answer.txt"]}))
    made = kforge("generate", "--problem", f"{LONGEST},19_ReLU", "--replay", str(replay), "--device", "cpu",
                  "--out", str(tmp_path / "out"))
    lines = _fits(made.stdout)
    (written,) = (tmp_path / "out").rglob("*.py")
    answered = next(line for line in lines if line.startswith("1 75_conv_"))
    assert answered.split()[2:] == ["cheat", "-", "0", "1", written.stem[:12]], answered
    missing = next(line for line in lines if line.startswith("2 19_ReLU"))
    assert missing.split()[2:] == ["no", "answer", "-", "-", "0", "-"], missing
    spent = next(line for line in lines if line.startswith("75_conv_"))
    assert spent.split()[1:] == ["1", "0", "0", "-", "1"], spent  # a replay is priced at nothing: no dollars said
    notes = [line for line in lines if re.match(r"\[[12]\] ", line)]
    assert notes[0].startswith("[1] cheat: ") and notes[1].startswith("[2] turn 0 sample 0: replay has no recording for 19_ReLU")
    assert any(line.startswith("run 1: spend") or "run 1: spend" in line for line in lines)

