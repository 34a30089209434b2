"""What the input fingerprint costs (evaluator.child.trials.fingerprint, taken before and after every trial and over
the leak check and timing) at KernelBench's own sizes: the position-weighted checksum against a plain sum of
the bit patterns (what it replaced, which a swap of two elements keeps), on the device the inputs live on.

    python benchmarks/fingerprint_cost.py [--device cuda] [GB ...]   (default 0.25 1.6 6.4; a JSON line per size)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch  # noqa: E402

from evaluator.child.trials import fingerprint  # noqa: E402


def _plain(t: torch.Tensor) -> int:
    """One int64 sum of the int32 bit patterns: the checksum before the weighted one."""
    return int(t.view(torch.int32).sum().item()) % 2**64


def _median_ms(fn, t: torch.Tensor, device: str, n: int = 7) -> float:
    times = []
    for _ in range(n):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn(t)  # both end in a host read of the result: the sync is inside
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gb", nargs="*", type=float, default=[0.25, 1.6, 6.4])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    for gb in args.gb:
        x = torch.randn(int(gb * 1e9) // 4, device=args.device)
        weighted, plain = _median_ms(lambda t: fingerprint([t]), x, args.device), _median_ms(_plain, x, args.device)
        print(json.dumps({"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "gb": gb,
                          "weighted_ms": round(weighted, 2), "plain_sum_ms": round(plain, 2),
                          "weighted_gb_per_s": round(gb / weighted * 1e3, 1)}), flush=True)
        del x


if __name__ == "__main__":
    main()
