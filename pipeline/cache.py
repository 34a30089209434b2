"""Responses cached in the db by request hash: a killed run resumes without paying twice for an answer. The key
holds where the request goes and all that is sent, so an answer is reused only for the very same request."""

from __future__ import annotations

import hashlib
import json

from db import Database, GenerationRow
from pipeline.llm import LLMRequest, LLMResponse, Provider, Usage


def request_hash(provider: Provider, request: LLMRequest) -> str:
    """Identical provider, endpoint, body (model, messages, sampling parameters) and draw (sample, turn) mean an
    identical request."""
    material = {"provider": provider.name, "endpoint": provider.endpoint, "body": provider.body(request),
                "draw": request.draw()}
    return hashlib.sha256(json.dumps(material, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def cached_response(row: GenerationRow) -> LLMResponse:
    usage = Usage(prompt_tokens=row.prompt_tokens, completion_tokens=row.completion_tokens)
    return LLMResponse(text=row.response, usage=usage, latency_s=row.latency_s, model=row.model, cost_usd=row.cost_usd)


def lookup(database: Database, key: str) -> tuple[LLMResponse, int] | None:
    """The stored answer to this request and its generation id, if it was ever paid for."""
    row = database.find_generation(key)
    return None if row is None else (cached_response(row), row.id)


def store(database: Database, key: str, provider: Provider, request: LLMRequest, response: LLMResponse,
          extraction_status: str, parent_generation_ids: list[int], run_id: int | None = None,
          island: int | None = None, prompt_kind: str = "draft") -> int:
    """Record the paid call at once, before any evaluation can crash or be killed, with every call its prompt built
    on (the refined parent first)."""
    return database.add_generation(
        problem=request.problem, request_hash=key, provider=provider.name, model=provider.model,
        prompt=request.messages, response=response.text, prompt_tokens=response.usage.prompt_tokens,
        completion_tokens=response.usage.completion_tokens, cost_usd=response.cost_usd, latency_s=response.latency_s,
        turn=request.turn, sample=request.sample, run_id=run_id, island=island,
        prompt_kind=prompt_kind,
        parent_generation_ids=parent_generation_ids, extraction_status=extraction_status,
    )
