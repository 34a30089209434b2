"""How the agent loop overlaps answers and judging, measured: one turn of N samples whose answers arrive D seconds
apart (the scripted server on 127.0.0.1), each a distinct candidate the real evaluator judges, and the turn's wall
time, when each answer arrived and was judged, and the median from an answer's arrival to its verdict.

On CPU each answer is pure PyTorch (caught as `cheat` without a compile, which still costs a child's start), one
evaluation at a time. With --device cuda each answer is a NEW CUDA kernel (its launch width differs, so no build is
shared), judged with the evaluator's own compile plan: the answer-to-verdict path of `kforge generate`.

    python benchmarks/agent_overlap.py [-n N] [--gap D] [--device cpu|cuda] [--size small|full]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from db import Database  # noqa: E402
from evaluator import EvalSettings  # noqa: E402
from fake_llm_server import FakeLLMServer, Reply, answer  # noqa: E402
from pipeline.llm import LLMSettings, OpenAIChat  # noqa: E402
from pipeline.loop import Loop, RunConfig  # noqa: E402
from reference_problems import resolve_problem  # noqa: E402

CANDIDATE = """import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * {k}.0
"""

CUDA_CANDIDATE = '''import torch
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}}
torch::Tensor relu(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + {width} - 1) / {width}, {width}, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
"""
ext = load_inline("relu_{width}", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=CUDA,
                  functions=["relu"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.relu(x.contiguous())
'''


def code(device: str, index: int) -> str:
    """A distinct candidate per answer: on CUDA a new kernel (its own launch width, so its own build)."""
    if device == "cuda":
        return CUDA_CANDIDATE.format(width=128 + 32 * index)
    return CANDIDATE.format(k=index + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=4, help="samples in the turn")
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between answers")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--size", choices=["small", "full"], default="small")
    args = parser.parse_args()
    script = lambda body, i: Reply(content=answer(code(args.device, i), f"answer {i}"), delay_s=i * args.gap)  # noqa: E731
    log: list[tuple[float, str, int]] = []
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(script) as server:
        jobs = 1 if args.device == "cpu" else None  # CUDA: the evaluator's own compile plan
        settings = EvalSettings(device=args.device, size=args.size, jobs=jobs, build_root=Path(tmp) / "builds")
        provider = OpenAIChat(LLMSettings(base_url=server.url, model="fake-coder", api_key="k"))
        config = RunConfig(samples=args.n, concurrency=args.n, out_dir=Path(tmp) / "out", profile=False)
        start = time.monotonic()
        with Database(f"sqlite:///{tmp}/kforge.db") as db:
            loop = Loop(provider, db, settings, config, events=lambda kind, c: log.append((time.monotonic(), kind, c.sample)))
            result = loop.run(resolve_problem("relu"))
        wall = time.monotonic() - start
    for t, kind, sample in log:
        print(f"{t - start:6.1f} s  sample {sample} {kind}")
    for c in sorted(result.candidates, key=lambda c: c.sample):
        stages = c.verdict.evidence.stage_s if c.verdict else {}
        print(f"sample {c.sample}: {c.status}; " + ", ".join(f"{k} {v:.2f} s" for k, v in stages.items()
                                                           if k in ("compile_child", "reference_wait", "load", "timed")))
    arrived = {sample: t for t, kind, sample in log if kind == "answered"}
    waits = [t - arrived[sample] for t, kind, sample in log if kind == "judged" and sample in arrived]
    print(f"turn of {args.n} answers {args.gap:g} s apart on {args.device} ({args.size}): {wall:.1f} s; statuses "
          f"{sorted(c.status for c in result.candidates)}; answer to verdict: median {statistics.median(waits):.1f} s, "
          f"max {max(waits):.1f} s over {len(waits)}")


if __name__ == "__main__":
    main()
