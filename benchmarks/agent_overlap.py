"""How the agent loop overlaps answers and judging, measured: one turn of N samples whose answers arrive D seconds
apart (the scripted server on 127.0.0.1), each a distinct candidate the real evaluator judges (pure PyTorch: caught
as `cheat` without a compile, which still costs a child's start), one evaluation at a time. The turn's wall time
and when each answer arrived and was judged.

    python benchmarks/agent_overlap.py [-n N] [--gap D]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=4, help="samples in the turn")
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between answers")
    args = parser.parse_args()
    script = lambda body, i: Reply(content=answer(CANDIDATE.format(k=i + 1), f"answer {i}"), delay_s=i * args.gap)  # noqa: E731
    log: list[tuple[float, str, int]] = []
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(script) as server:
        settings = EvalSettings(device="cpu", size="small", jobs=1, build_root=Path(tmp) / "builds")
        provider = OpenAIChat(LLMSettings(base_url=server.url, model="fake-coder", api_key="k"))
        config = RunConfig(samples=args.n, concurrency=args.n, out_dir=Path(tmp) / "out")
        start = time.monotonic()
        with Database(f"sqlite:///{tmp}/kforge.db") as db:
            loop = Loop(provider, db, settings, config, events=lambda kind, c: log.append((time.monotonic(), kind, c.sample)))
            result = loop.run(resolve_problem("relu"))
        wall = time.monotonic() - start
    for t, kind, sample in log:
        print(f"{t - start:6.1f} s  sample {sample} {kind}")
    print(f"turn of {args.n} answers {args.gap:g} s apart: {wall:.1f} s; statuses "
          f"{sorted(c.status for c in result.candidates)}")


if __name__ == "__main__":
    main()
