"""What LLM calls cost: a price table per model (USD per million tokens, prompt and completion apart), applied to
the usage the API reports for each call. Spend itself is stored with each call (db generations) and summed there."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field, RootModel, ValidationError


class LedgerError(ValueError):
    """A price file that cannot be read as {model: {"prompt": USD, "completion": USD}}."""


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Price(BaseModel):
    """USD per 1M tokens, as providers list them."""

    prompt: float = Field(ge=0)
    completion: float = Field(ge=0)

    def cost(self, usage: Usage) -> float:
        return (usage.prompt_tokens * self.prompt + usage.completion_tokens * self.completion) / 1e6


class PriceTable(RootModel[dict[str, Price]]):
    """Model name -> price. A model missing from the table costs None (unknown), never 0: totals say how many calls
    were unpriced rather than under-report."""

    root: dict[str, Price] = Field(default_factory=dict)

    def cost(self, model: str, usage: Usage) -> float | None:
        price = self.root.get(model)
        return None if price is None else price.cost(usage)

    @classmethod
    def load(cls, path: Path) -> PriceTable:
        try:
            return cls.model_validate(json.loads(path.read_text()))
        except (OSError, ValueError, ValidationError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise LedgerError(f"price file {path}: {first} (expected {{\"MODEL\": {{\"prompt\": USD_PER_MTOK, "
                              f"\"completion\": USD_PER_MTOK}}}})") from None
