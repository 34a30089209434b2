"""The agent loop on a GPU, two turns, with Nsight Compute in the refine prompt: writes turn 2's prompt.

Usage (on the GPU host, ncu on PATH): python benchmarks/agent_profile_demo.py OUT_FILE [PROBLEM]

The scripted OpenAI-compatible server of the tests (tests/fake_llm_server.py) answers every request with a human
repair from solutions/ that is correct on CUDA; `kforge generate` runs 2 turns on device cuda against it, in a db
of its own. Turn 1's best correct kernel is profiled with ncu in the profile jail, and turn 2's refine prompt,
read back from the db where every prompt is stored, goes to OUT_FILE with the run's own messages on stderr (a
line "Nsight Compute on ...: why" when no profile was taken).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from db import Database  # noqa: E402
from fake_llm_server import FakeLLMServer, Reply, answer  # noqa: E402

ANSWERS = {"avg_pool_1d": "solutions/avg_pool_1d/repair_000_header_call.py",
           "matmul_maxpool_sum_scale": "solutions/matmul_maxpool_sum_scale/repair_003_completed.py"}


def main() -> None:
    out_file, problem = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "avg_pool_1d"
    code = (ROOT / ANSWERS[problem]).read_text()
    work = Path(tempfile.mkdtemp(prefix="kforge-profile-demo-"))
    db_url = f"sqlite:///{work / 'kforge.db'}"
    with FakeLLMServer(lambda body, i: Reply(content=answer(code, f"answer {i}"))) as server:
        cmd = [sys.executable, "-m", "kforge", "generate", "--problem", problem, "--turns", "2", "--device", "cuda",
               "--base-url", server.url, "--model", "fake-coder", "--db", db_url, "--out", str(work / "generations"),
               "--sol-stop", "0"]
        run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    sys.stderr.write(run.stderr[-4000:])
    with Database(db_url) as database:
        refine = [g for g in database.generations(problem) if g.turn == 1]
    if not refine:
        raise SystemExit(f"no turn-2 prompt in {db_url} (exit status {run.returncode})")
    prompt = refine[0].prompt
    out_file.write_text("\n\n".join(f"--- {m['role']} ---\n{m['content']}" for m in prompt) + "\n")
    said = "with" if "Nsight Compute, per kernel" in prompt[-1]["content"] else "WITHOUT"
    print(f"turn 2's prompt ({said} Nsight Compute metrics) written to {out_file}; db {db_url}")


if __name__ == "__main__":
    main()
