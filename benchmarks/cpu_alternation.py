"""Two fresh processes running the same eager code take turns on one core, in blocks of 10 timed calls in a random
order, as kforge's paired CPU timing does; the median ratio of their blocks, per pair. Identical work should give
1.0. On a 2-core VM (8 pairs each, the defaults below), without a cache flush before each call the pairs came out
0.92-1.16, each steady; with one (`--flush`: what evaluator.child.timing.cpu_flush_buffer does), 0.97-1.02.

    python benchmarks/cpu_alternation.py [PAIRS] [--flush]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

_BLOCK, _PAIRS_OF_BLOCKS = 10, 30


def _worker(flush: bool) -> None:
    """Times blocks of the scale_bias_hardswish reference's ops (small size) on fresh values, one per line asked."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from evaluator.child.timing import cpu_flush_buffer

    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    torch.set_num_threads(1)
    x, bias, scrub = torch.randn(64, 4096), torch.randn(4096), cpu_flush_buffer() if flush else None

    def call():
        y = x * 0.5 + bias
        return y * torch.clamp(y + 3.0, 0.0, 6.0) / 6.0
    for _ in range(100):
        call()
    print("ready", flush=True)
    for _ in sys.stdin:
        samples = []
        for _ in range(_BLOCK):
            if scrub is not None:
                scrub.add_(1)
            x.copy_(torch.randn(64, 4096))
            start = time.perf_counter()
            call()
            samples.append(time.perf_counter() - start)
        print(statistics.median(samples), flush=True)


def _start(flush: bool) -> subprocess.Popen:
    env = os.environ | {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}  # as kforge's CPU timing children
    proc = subprocess.Popen([sys.executable, __file__, "--worker", *(["--flush"] if flush else [])], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _block(proc: subprocess.Popen) -> float:
    proc.stdin.write("go\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def main(pairs: int, flush: bool) -> None:
    for pair in range(pairs):
        a, b = _start(flush), _start(flush)
        ratios = []
        for _ in range(_PAIRS_OF_BLOCKS):
            first, second = (a, b) if random.random() < 0.5 else (b, a)
            times = {id(first): _block(first), id(second): _block(second)}
            ratios.append(times[id(a)] / times[id(b)])
        print(f"pair {pair}: {statistics.median(ratios):.3f}", flush=True)
        for proc in (a, b):
            proc.stdin.close()
            proc.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("pairs", type=int, nargs="?", default=8)
    parser.add_argument("--flush", action="store_true")
    parser.add_argument("--worker", action="store_true")
    args = parser.parse_args()
    _worker(args.flush) if args.worker else main(args.pairs, args.flush)
