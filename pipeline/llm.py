"""LLM providers: one protocol, an OpenAI-compatible client for any server (vLLM, SGLang, Ollama, hosted APIs)."""

from __future__ import annotations

import time
from typing import Any, Protocol

from pydantic import BaseModel, Field, SecretStr

from pipeline.ledger import PriceTable, Usage


class LLMError(RuntimeError):
    """No answer could be had (server down, out of retries, no recording): one line, never the API key."""


class LLMRequest(BaseModel):
    """One chat completion to ask for; sample and turn make N draws of one prompt N requests."""

    problem: str
    messages: list[dict[str, Any]]
    sample: int = 0
    turn: int = 0
    temperature: float | None = None
    max_tokens: int | None = None

    def draw(self) -> dict[str, int]:
        """Which draw of its body this is (part of the cache key): the N samples of one prompt are N answers, and a
        later turn that repeats a conversation (its parent is still the best) draws afresh."""
        return {"sample": self.sample, "turn": self.turn}


class LLMResponse(BaseModel):
    text: str
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    model: str
    finish_reason: str | None = None
    cost_usd: float | None = None


class Provider(Protocol):
    name: str
    model: str
    endpoint: str  # where answers come from (a server's URL): the same body sent elsewhere is another request

    def body(self, request: LLMRequest) -> dict[str, Any]:
        """Everything sent that decides the answer (model, messages, every sampling parameter): the cache key's."""
        ...

    def complete(self, request: LLMRequest) -> LLMResponse: ...


class LLMSettings(BaseModel):
    """How to reach and pay for a model. The pipeline reads no environment: `kforge generate` fills these from the
    KFORGE_LLM_* variables (kforge.settings.LLMEnv), its flags overriding base_url and model."""

    base_url: str | None = None  # None: the openai package's default (api.openai.com)
    model: str | None = None
    api_key: SecretStr | None = None
    timeout_s: float = 600.0
    max_retries: int = 5  # on 408/409/429/5xx and connection errors, exponential backoff (openai's own)
    temperature: float | None = None
    max_tokens: int | None = None
    prices: PriceTable = Field(default_factory=PriceTable)  # per model: {"MODEL": {"prompt": 3, "completion": 15}}


class OpenAIChat:
    """Chat completions over the openai package; retries with backoff and the timeout are the client's."""

    name = "openai"

    def __init__(self, settings: LLMSettings) -> None:
        if not settings.model:
            raise LLMError("no model: pass --model or set KFORGE_LLM_MODEL")
        self.settings = settings
        self.model = settings.model
        key = settings.api_key.get_secret_value() if settings.api_key else "unused"  # local servers want none
        import openai  # here: replay, and every other command, run without the openai package loaded

        self._errors = (openai.APIStatusError, openai.APIError)
        self.client = openai.OpenAI(base_url=settings.base_url, api_key=key, timeout=settings.timeout_s,
                                    max_retries=settings.max_retries)
        self.endpoint = str(self.client.base_url)  # as the client resolved it: no --base-url is OpenAI's (or $OPENAI_BASE_URL)

    def body(self, request: LLMRequest) -> dict[str, Any]:
        """The create() arguments, so what is sent and what the cache key holds cannot drift apart."""
        extra = {k: v for k, v in (("temperature", request.temperature), ("max_tokens", request.max_tokens)) if v is not None}
        return {"model": self.model, "messages": request.messages, **extra}

    def complete(self, request: LLMRequest) -> LLMResponse:
        start = time.monotonic()
        try:
            reply = self.client.chat.completions.create(**self.body(request))
        except self._errors[0] as exc:
            raise LLMError(f"{self.client.base_url} answered HTTP {exc.status_code}: {_first_line(exc.message)}") from None
        except self._errors[1] as exc:  # connection refused, timeout, malformed answer
            raise LLMError(f"{self.client.base_url}: {type(exc).__name__}: {_first_line(str(exc))}") from None
        if not reply.choices:
            raise LLMError(f"{self.client.base_url} returned no choices")
        usage = Usage(prompt_tokens=getattr(reply.usage, "prompt_tokens", 0) or 0,
                      completion_tokens=getattr(reply.usage, "completion_tokens", 0) or 0)
        choice = reply.choices[0]
        return LLMResponse(text=choice.message.content or "", usage=usage, latency_s=time.monotonic() - start,
                           model=reply.model or self.model, finish_reason=choice.finish_reason,
                           cost_usd=self.settings.prices.cost(self.model, usage))


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]
