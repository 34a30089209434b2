"""The archive's two feature axes, read from a correct candidate and its verdict:

- speedup bucket: which of the configured edges its speedup passed (edges 1, 1.5, 2, 4 give <1, 1-1.5, 1.5-2, 2-4, >=4);
- technique: the first of TECHNIQUES found in its code (comments dropped), in the order listed, else "plain".
  tensor_cores (wmma / mma.sync / tcgen05), shared_memory (__shared__), tiling (names starting tile/TILE,
  BLOCK_M-style constants, loops stepping by a block size), vectorized (float4 / half2 / SSE-AVX intrinsics), simd (#pragma omp simd, GCC ivdep, __restrict__
  hints for the auto-vectorizer), parallel (at::parallel_for, #pragma omp parallel), fusion (a kernel named fused_*).
  The order puts the rarer, more telling technique first, so a tiled shared-memory kernel lands in shared_memory.

A MAP-Elites cell is "bucket|technique": the archive keeps the fastest candidate of each, so a slower kernel that
tries a different technique survives beside the fastest one."""

from __future__ import annotations

import bisect
import re

from pipeline.dedupe import C_COMMENTS

TECHNIQUES: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern) for name, pattern in (
        ("tensor_cores", r"\bwmma::|\bmma\.sync\b|\btcgen05|\bmma_sync\b"),
        ("shared_memory", r"__shared__"),
        ("tiling", r"\b(TILE|[Tt]ile)\w*|\bBLOCK_[MNK]\b|\bfor\s*\([^;]*;[^;]*;\s*\w+\s*\+=\s*(BLOCK|BM|BN|BK)\w*"),
        ("vectorized", r"\b(float|half|int|__half|__nv_bfloat16)[248]\b|\b__m(128|256|512)\w*|\b_mm\d*_\w+"),
        ("simd", r"#\s*pragma\s+(omp\s+(parallel\s+for\s+)?simd|GCC\s+ivdep)|__restrict__?"),
        ("parallel", r"\bat::parallel_for\b|#\s*pragma\s+omp\s+parallel"),
        ("fusion", r"\bfused\w*|\w*_fused\b"),
    )
}
PLAIN = "plain"


def techniques(source: str) -> list[str]:
    """Every technique whose mark is in the code, in TECHNIQUES order."""
    code = C_COMMENTS.sub("", re.sub(r"#(?!\s*(pragma|include|define))[^\n]*", "", source))
    return [name for name, pattern in TECHNIQUES.items() if pattern.search(code)]


def technique(source: str) -> str:
    return next(iter(techniques(source)), PLAIN)


def speedup_bucket(speedup: float, edges: list[float]) -> str:
    """The half-open interval of the sorted edges the speedup falls in, named by its bounds."""
    edges = sorted(edges)
    i = bisect.bisect_right(edges, speedup)
    if i == 0:
        return f"<{edges[0]:g}"
    if i == len(edges):
        return f">={edges[-1]:g}"
    return f"{edges[i - 1]:g}-{edges[i]:g}"


def cell_of(source: str, speedup: float, edges: list[float]) -> str:
    return f"{speedup_bucket(speedup, edges)}|{technique(source)}"
