"""The LLM response cache against a real OpenAI-compatible server on 127.0.0.1 and `kforge generate` run as a user
runs it: an answer is reused only for the very same request, said to be cached, and --fresh asks again."""

from __future__ import annotations

import json
import socket

import pytest

from conftest import kforge_runner
from db import Database
from fake_llm_server import FakeLLMServer, Reply
from pipeline.cache import request_hash
from pipeline.llm import LLMRequest, LLMSettings, OpenAIChat

REQUEST = LLMRequest(problem="relu", messages=[{"role": "user", "content": "write a kernel"}], temperature=0.2,
                     max_tokens=64)


def chat(base_url: str | None, model: str = "coder") -> OpenAIChat:
    return OpenAIChat(LLMSettings(base_url=base_url, model=model))


def numbered(body: dict, index: int) -> Reply:
    """Each request its own answer (no code in it, so nothing compiles): which answer came back tells which call."""
    return Reply(content=f"No code today, answer number {index}.")


def dead_url() -> str:
    """A port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_the_key_is_what_is_sent_and_where():
    with FakeLLMServer(numbered) as server:
        provider = chat(server.url)
        provider.complete(REQUEST)
        assert server.requests == [provider.body(REQUEST)]  # the key's body is the request's body, to the letter
        key = request_hash(provider, REQUEST)
        assert request_hash(chat(server.url), REQUEST) == key
        others = [request_hash(chat(None), REQUEST), request_hash(chat(dead_url()), REQUEST),
                  request_hash(chat(server.url, model="other"), REQUEST)]
        others += [request_hash(provider, REQUEST.model_copy(update=change)) for change in (
            {"temperature": 0.8}, {"max_tokens": 65}, {"sample": 1}, {"turn": 1},
            {"messages": [{"role": "user", "content": "write another kernel"}]})]
    assert key not in others and len(set(others)) == len(others)


@pytest.fixture
def kforge(tmp_path, build_root):
    return kforge_runner(tmp_path, build_root, KFORGE_LLM_MAX_RETRIES="0")


def generate(kforge, url: str, *extra: str, expect: int = 0):
    return kforge("generate", "--problem", "relu", "--samples", "3", "--device", "cpu", "--model", "coder",
                  "--base-url", url, *extra, expect=expect)


def candidates(proc) -> list[dict]:
    return [line for line in map(json.loads, proc.stdout.splitlines()) if line["kind"] == "candidate"]


def test_samples_are_requests_a_rerun_says_cached_and_fresh_asks_again(kforge):
    with FakeLLMServer(numbered) as server:
        first = candidates(generate(kforge, server.url, "--json"))
        assert len(server.requests) == 3 and not any(c["cached"] for c in first)
        answers = {g.sample: g.response for g in Database(kforge.db_url).generations("relu")}
        assert len(set(answers.values())) == 3  # three draws, three answers: not one answer three times

        again = generate(kforge, server.url)
        assert len(server.requests) == 3  # nothing asked
        said = again.stderr.splitlines()
        assert sorted(line for line in said if line.endswith("no_code (cached)")) == [
            f"kforge: relu turn 0 sample {i} [coder]: no_code (cached)" for i in range(3)], again.stderr
        assert "kforge: 3 of 3 answers were stored before (no call made): --fresh asks the server again" in said
        assert "no_code (cached)" in again.stdout and "3 (3 cached)" in again.stdout  # the best-candidate table

        fresh = candidates(generate(kforge, server.url, "--fresh", "--json"))
        assert len(server.requests) == 6 and not any(c["cached"] for c in fresh)
        cached = candidates(generate(kforge, server.url, "--json"))
        assert all(c["cached"] for c in cached) and len(server.requests) == 6
    # the newest answers are the ones reused
    assert {c["generation_id"] for c in cached} == {c["generation_id"] for c in fresh}


def test_another_server_gets_no_cached_answer_and_a_dead_one_is_one_line(kforge):
    with FakeLLMServer(numbered) as server:
        generate(kforge, server.url)
    url = dead_url()
    proc = generate(kforge, url, expect=1)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors == [f"kforge: error: no answer came: turn 0 sample 0: {url}/: APIConnectionError: Connection error. "
                      "(and 2 more failed)"], proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
