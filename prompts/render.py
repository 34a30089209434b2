"""Render problems and verdicts into chat prompts; wording lives in templates/*.j2, logic here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import jinja2
from pydantic import BaseModel

from evaluator.contracts import DTYPE_NAMES, Profile, Verdict, tolerance
from evaluator.protocol import Precision
from evaluator.diagnose import error_lines
from reference_problems import Problem

Target = Literal["cuda", "cpu", "triton"]  # CUDA C++ or C++ with load_inline, or Triton kernels (on a GPU)

LANGUAGE = {"cuda": "CUDA", "cpu": "C++", "triton": "Triton"}
CANDIDATE_LINE = re.compile(r"\bline (\d+)")
DIRECTORIES = re.compile(r"(?<![\w.:/])/(?:[^\s/:'\"`]+/)+(?=[^\s/:'\"`]+)")
ADDRESSES = re.compile(r" at 0x[0-9a-fA-F]+(?=>)")  # `<function f at 0x7f...>`: differs in every process


class Turn(BaseModel):
    """One earlier attempt shown back to the model: the candidate it wrote and what the evaluator said."""

    source: str
    verdict: Verdict
    profile: Profile | None = None  # Nsight Compute's view of this candidate (evaluator/parent/profiling.py), on a GPU


class Program(BaseModel):
    """A correct kernel shown to the model as an example to learn from, with what it measured."""

    source: str
    speedup: float
    median_ms: float | None = None
    technique: str = "plain"


class Example(Program):
    """A verified kernel of another, similar problem (pipeline/retrieval.py), shown in a problem's first prompt."""

    problem: str
    operators: list[str]
    similarity: float


def tail_lines(log: str, limit: int = 25) -> str:
    """A traceback's last frames and the exception message are at its end."""
    return "\n".join(log.rstrip().splitlines()[-limit:])


def format_number(x: float) -> str:
    """1e-4 rather than 0.0001, as the prompts of the seed transcripts write tolerances."""
    mantissa, exponent = f"{x:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def format_tolerance(atol: float, rtol: float) -> str:
    if atol == rtol:
        return format_number(atol)
    return f"an absolute tolerance of {format_number(atol)} and a relative tolerance of {format_number(rtol)}"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).resolve().parent / "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(error_lines=error_lines, tail_lines=tail_lines)
    return env


ENV = _environment()


def render_system(target: Target = "cuda") -> str:
    return ENV.get_template("system.j2").render(lang=LANGUAGE[target]).strip()


def render_prompt(problem: Problem, target: Target = "cuda", size: str = "full", precision: Precision = "fp32") -> str:
    """The first user message: instructions, the one-shot example, the architecture, the dtype its inputs and
    weights are cast to (below fp32) and the tolerance at that precision."""
    return ENV.get_template("prompt.j2").render(
        problem=problem,
        source=problem.source().rstrip(),
        target=target,
        lang=LANGUAGE[target],
        tolerance=format_tolerance(*tolerance(problem, precision)),
        dtype=DTYPE_NAMES[precision] if precision != "fp32" else None,
        small=problem.meta.small if size == "small" else {},
    ).strip()


def _excerpt(verdict: Verdict, source: str, context: int = 2) -> str:
    """Number the candidate lines a syntax error or traceback names: models cannot count lines of their own code."""
    evidence = verdict.evidence
    name = Path(verdict.solution_path).name if verdict.solution_path else None
    numbers = [int(n) for n in CANDIDATE_LINE.findall(evidence.cause)] if evidence.stage == "parse" else []
    if name:
        frames = re.findall(rf'File "[^"]*{re.escape(name)}", line (\d+)', evidence.log_tail)
        numbers += [int(n) for n in frames[-1:]]
    lines = source.splitlines()
    keep = sorted({i for n in numbers for i in range(n - context, n + context + 1) if 1 <= i <= len(lines)})
    return "\n".join(f"{i:4d} | {lines[i - 1]}" for i in keep)


def render_feedback(verdict: Verdict, source: str, profile: Profile | None = None) -> str:
    """A refinement request: what the evaluator found wrong (or how fast it was), with Nsight Compute's metrics of
    its top kernels when it was profiled, then ask for a better kernel. Directories are dropped from paths: build
    and sandbox paths are noise to the model and private to us, as are objects' addresses (which would also make the
    same failure a new prompt each time, missing the response cache)."""
    text = ENV.get_template("feedback.j2").render(verdict=verdict, evidence=verdict.evidence, excerpt=_excerpt(verdict, source),
                                                  profile=profile)
    return ADDRESSES.sub("", DIRECTORIES.sub("", text)).strip()


def render_inspirations(programs: list[Program], device_name: str = "") -> str:
    """Other kernels of the problem with their numbers, added to a refine request: the model sees what was fast."""
    return ENV.get_template("inspirations.j2").render(programs=programs, device_name=device_name).strip()


def render_related(examples: list[Example], device_name: str = "") -> str:
    """Kernels of similar problems with their numbers, added to a problem's first prompt."""
    return ENV.get_template("related.j2").render(examples=examples, device_name=device_name).strip()


def render_contrast(slow: Program, fast: Program, device_name: str = "") -> str:
    """A slower and a faster kernel side by side with their numbers, and a request to say why one is faster."""
    return ENV.get_template("contrast.j2").render(slow=slow, fast=fast, device_name=device_name).strip()


def render_crossover(a: Program, b: Program, device_name: str = "") -> str:
    """A request to combine two kernels, each with its numbers."""
    return ENV.get_template("crossover.j2").render(a=a, b=b, device_name=device_name).strip()


def fenced(source: str) -> str:
    return f"```python\n{source.rstrip()}\n```"


def chat_messages(problem: Problem, history: list[Turn], target: Target = "cuda", size: str = "full",
                  precision: Precision = "fp32", inspirations: list[Program] | None = None, device_name: str = "",
                  related: list[Example] | None = None, contrast: tuple[Program, Program] | None = None) -> list[dict]:
    """The whole conversation: the prompt (with kernels of similar problems, if any), then per earlier attempt its
    code and the evaluator's feedback; the inspirations and the contrastive pair, if any, follow the last feedback."""
    messages = [
        {"role": "system", "content": render_system(target)},
        {"role": "user", "content": render_prompt(problem, target, size, precision)},
    ]
    if related:
        messages[-1]["content"] += "\n\n" + render_related(related, device_name)
    for turn in history:
        messages.append({"role": "assistant", "content": fenced(turn.source)})
        messages.append({"role": "user", "content": render_feedback(turn.verdict, turn.source, turn.profile)})
    if inspirations:
        messages[-1]["content"] += "\n\n" + render_inspirations(inspirations, device_name)
    if contrast:
        messages[-1]["content"] += "\n\n" + render_contrast(*contrast, device_name)
    return messages


def crossover_messages(problem: Problem, a: Program, b: Program, target: Target = "cuda", size: str = "full",
                       device_name: str = "", precision: Precision = "fp32") -> list[dict]:
    """The prompt, then a request to combine two kernels: no earlier conversation, both parents stand side by side."""
    return [
        {"role": "system", "content": render_system(target)},
        {"role": "user", "content": render_prompt(problem, target, size, precision) + "\n\n" + render_crossover(a, b, device_name)},
    ]
