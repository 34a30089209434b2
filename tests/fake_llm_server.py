"""A real OpenAI chat-completions server on 127.0.0.1, scripted per test (also runnable: the README's repair demo).

    python tests/fake_llm_server.py --port 8000
    kforge generate --problem relu --turns 2 --device cpu --base-url http://127.0.0.1:8000/v1 --model fake-coder

    python tests/fake_llm_server.py --port 8000 --script triton --save-prompts /tmp/triton-prompts
    kforge generate --problem relu --turns 2 --device cpu --backend triton --base-url http://127.0.0.1:8000/v1 --model fake-coder
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pydantic import BaseModel, Field


class Reply(BaseModel):
    content: str = ""
    status: int = 200
    finish_reason: str = "stop"
    delay_s: float = 0.0
    headers: dict[str, str] = Field(default_factory=dict)
    prompt_tokens: int | None = None  # the usage to report; None: count words
    completion_tokens: int | None = None


Script = Callable[[dict, int], Reply]  # (request body, 0-based request number) -> reply


def completion(body: dict, reply: Reply, index: int) -> dict:
    """A chat.completion object as the openai package validates it; tokens as scripted, else counted as words."""
    prompt_words = reply.prompt_tokens if reply.prompt_tokens is not None else sum(
        len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    completion_words = reply.completion_tokens if reply.completion_tokens is not None else len(reply.content.split())
    return {
        "id": f"chatcmpl-fake-{index}", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.content},
                     "finish_reason": reply.finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": prompt_words, "completion_tokens": completion_words,
                  "total_tokens": prompt_words + completion_words},
    }


class FakeLLMServer:
    """Context manager: serves POST /v1/chat/completions from a script and keeps every request it saw."""

    def __init__(self, script: Script | list[Reply], host: str = "127.0.0.1", port: int = 0) -> None:
        self.script = script if callable(script) else (lambda body, i: script[min(i, len(script) - 1)])
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self.arrivals: list[float] = []  # time.time() of each request
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeLLMServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _answer(self, body: dict, headers: dict[str, str]) -> tuple[Reply, int]:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.headers.append(headers)
            self.arrivals.append(time.time())
        return self.script(body, index), index

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _send(self, status: int, payload: dict, headers: dict[str, str]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and hung up: its business
                    pass

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}, {})
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                reply, index = server._answer(body, {k.lower(): v for k, v in self.headers.items()})
                time.sleep(reply.delay_s)
                if reply.status != 200:
                    error = {"error": {"message": f"scripted HTTP {reply.status}", "type": "scripted", "code": reply.status}}
                    self._send(reply.status, error, reply.headers)
                else:
                    self._send(200, completion(body, reply, index), reply.headers)

        return Handler


# -- the two-turn repair demo: a relu kernel that does not compile, then, once the error is fed back, one that does --

COMPILER_ERROR_TEXT = "was not declared in this scope"

BROKEN_RELU = r'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor relu_forward(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* src = xc.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    at::parallel_for(0, total_elems, 16384, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dst[i] = src[i] > 0.0f ? src[i] : 0.0f;
    });
    return out;
}
"""

relu_module = load_inline(name="fake_relu_broken", cpp_sources=relu_source, functions=["relu_forward"],
                          extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_module.relu_forward(x)
'''

FIXED_RELU = BROKEN_RELU.replace("at::parallel_for(0, total_elems,", "const int64_t total_elems = xc.numel();\n    at::parallel_for(0, total_elems,").replace(
    "fake_relu_broken", "fake_relu_fixed")


def answer(code: str, note: str) -> str:
    return f"<think>\n{note}\n</think>\n\nHere is the optimized architecture.\n\n```python\n{code}```\n"


def repair_script(body: dict, index: int) -> Reply:
    """The fix comes only when the last user message carries the compiler's error: the feedback is what repairs."""
    last_user = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    if COMPILER_ERROR_TEXT in last_user:
        return Reply(content=answer(FIXED_RELU, "The compiler says total_elems is undeclared: declare it from xc.numel()."))
    return Reply(content=answer(BROKEN_RELU, "A parallel loop over raw float pointers, built with -O3."))


# -- the same repair in Triton: a helper the kernel calls lacks @triton.jit. Triton's interpreter (CPU) runs it as
# Python, so only the compile for a GPU target, which kforge runs as proof, rejects it --

TRITON_ERROR_TEXT = "Unsupported function referenced"

TRITON_BROKEN_RELU = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


def clamp_negative(x):
    return tl.where(x > 0, x, 0.0)


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, clamp_negative(x), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
'''

TRITON_FIXED_RELU = TRITON_BROKEN_RELU.replace("\ndef clamp_negative", "\n@triton.jit\ndef clamp_negative")


def triton_repair_script(body: dict, index: int) -> Reply:
    """The Triton fix comes only when the last user message carries the GPU compile's error."""
    last_user = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    if TRITON_ERROR_TEXT in last_user:
        return Reply(content=answer(TRITON_FIXED_RELU, "The GPU compile rejects a plain Python helper: make it @triton.jit."))
    return Reply(content=answer(TRITON_BROKEN_RELU, "One Triton kernel, the clamp in a small helper."))


SCRIPTS = {"cpp": repair_script, "triton": triton_repair_script}


def saving(script: Script, folder: Path) -> Script:
    """The script, with each request's messages also written to FOLDER/request_N.md as the model reads them."""
    folder.mkdir(parents=True, exist_ok=True)

    def answer_and_save(body: dict, index: int) -> Reply:
        text = "\n\n".join(f"## {m['role']}\n\n{m['content']}" for m in body.get("messages", []))
        (folder / f"request_{index}.md").write_text(text + "\n")
        return script(body, index)

    return answer_and_save


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--script", choices=sorted(SCRIPTS), default="cpp",
                        help="the relu repair demo in C++ (load_inline) or in Triton")
    parser.add_argument("--save-prompts", type=Path, metavar="DIR", help="write each request's messages to DIR")
    args = parser.parse_args()
    script = SCRIPTS[args.script]
    if args.save_prompts:
        script = saving(script, args.save_prompts)
    with FakeLLMServer(script, port=args.port) as server:
        print(f"fake OpenAI server (relu repair demo, {args.script}) at {server.url}", flush=True)
        try:
            server.thread.join()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
