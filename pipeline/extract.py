"""Turn an LLM answer into a candidate file, or say precisely why there is none, before any compile is spent."""

from __future__ import annotations

import enum
import re

from pydantic import BaseModel

from evaluator.contracts import Status
from evaluator.static import check_source

THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
OPEN_FENCE = re.compile(r"^\s*```\s*([\w+-]*)\s*$")
PYTHON_TAGS = {"python", "py", "python3"}


class ExtractionStatus(str, enum.Enum):
    OK = "ok"
    TRUNCATED = "truncated"
    SYNTAX_ERROR = "syntax_error"
    NO_CODE = "no_code"
    NO_MODEL_NEW = "no_model_new"


# What the evaluator would call each failure, so extraction failures are stored like any other verdict.
VERDICT_STATUS = {
    ExtractionStatus.TRUNCATED: Status.TRUNCATED,
    ExtractionStatus.SYNTAX_ERROR: Status.SYNTAX_ERROR,
    ExtractionStatus.NO_CODE: Status.INVALID,
    ExtractionStatus.NO_MODEL_NEW: Status.INVALID,
}
_FROM_STATIC = {Status.TRUNCATED: ExtractionStatus.TRUNCATED, Status.SYNTAX_ERROR: ExtractionStatus.SYNTAX_ERROR,
                Status.INVALID: ExtractionStatus.NO_MODEL_NEW}


class Extraction(BaseModel):
    status: ExtractionStatus
    code: str | None = None  # the final python block, byte for byte (even when cut off, for inspection)
    cause: str = ""

    @property
    def ok(self) -> bool:
        return self.status is ExtractionStatus.OK


class Block(BaseModel):
    lang: str
    body: str
    closed: bool


def strip_reasoning(text: str) -> tuple[str, bool]:
    """Drop <think> blocks (and everything before a bare </think>); True when the answer stopped inside reasoning."""
    text = THINK_BLOCK.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        return text.split("<think>", 1)[0], True
    return text, False


def fenced_blocks(text: str) -> list[Block]:
    """Pair fences in order, so a closing ``` is never mistaken for the opening of an untagged block."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    blocks, current = [], None
    for line in lines:
        if current is None:
            match = OPEN_FENCE.match(line)
            if match:
                current = Block(lang=match.group(1).lower(), body="", closed=False)
                blocks.append(current)
        elif line.lstrip().startswith("```"):
            current.closed, current = True, None
        else:
            current.body += line
    return blocks


def final_python_block(text: str) -> Block | None:
    """The last ```python block; an untagged block only when no block is tagged python."""
    blocks = fenced_blocks(text)
    tagged = [b for b in blocks if b.lang in PYTHON_TAGS]
    untagged = [b for b in blocks if not b.lang]
    return (tagged or untagged or [None])[-1]


def extract(text: str, finish_reason: str | None = None) -> Extraction:
    """Final python block of the answer, classified: ok, truncated, syntax_error, no_code or no_model_new."""
    answer, cut_in_reasoning = strip_reasoning(text)
    block = final_python_block(answer)
    if block is None:
        if cut_in_reasoning or finish_reason == "length":
            return Extraction(status=ExtractionStatus.TRUNCATED, cause="the answer was cut off before any code block")
        return Extraction(status=ExtractionStatus.NO_CODE, cause="the answer has no fenced python code block")
    check = check_source(block.body)
    if not block.closed and not (finish_reason == "stop" and check.status is None):
        return Extraction(status=ExtractionStatus.TRUNCATED, code=block.body,
                          cause=f"the final code block has no closing fence: the answer was cut off after "
                                f"{block.body.count(chr(10))} lines")
    if check.status is not None:
        return Extraction(status=_FROM_STATIC[check.status], code=block.body, cause=check.cause)
    return Extraction(status=ExtractionStatus.OK, code=block.body)
