"""What a call's page shows besides its numbers: the prompt as the model read it, message by message, and the
feedback its answer earns (the text a refine prompt built on it shows the model), so a failure can be read in
place: what was asked, what came back and what the evaluator said of it."""

from __future__ import annotations

from typing import Any, NamedTuple

from pydantic import ValidationError

from db import EvaluationRow
from evaluator.contracts import Verdict
from prompts import render_feedback


class Message(NamedTuple):
    role: str
    what: str  # what the message is in the conversation
    text: str


def conversation(prompt: list[dict[str, Any]]) -> list[Message]:
    """The stored chat messages, each named by its part: the first user message is the task, an assistant message
    an earlier answer and every later user message the evaluator's feedback on the answer before it."""
    messages, asked = [], False
    for m in prompt:
        role, content = str(m.get("role", "?")), m.get("content", "")
        text = content if isinstance(content, str) else str(content)
        if role == "user":
            what, asked = ("feedback on the answer above" if asked else "the task"), True
        else:
            what = {"assistant": "an earlier answer", "system": "system prompt"}.get(role, role)
        messages.append(Message(role, what, text))
    return messages


def feedback(row: EvaluationRow, source: str) -> str:
    """The feedback a refine prompt gives on this verdict, as the agent loop renders it; a row an older kforge stored
    in a form this one no longer reads gives its cause and log instead, so the page is still written."""
    try:
        return render_feedback(Verdict.from_row(row), source)
    except ValidationError:
        return "\n\n".join(filter(None, (row.cause, row.evidence.get("hint"), row.evidence.get("log_tail"))))
