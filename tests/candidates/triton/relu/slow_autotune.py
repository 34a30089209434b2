"""Hostile: autotunes for minutes. Eight block sizes, each benchmarked by a `do_bench` of its own that launches the
config again and again for half a minute "for stable numbers": four minutes of launches before forward() returns
the first time. The kernel and the config it picks are honest."""
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

_BENCH_S = 30.0


def patient_bench(kernel_call, quantiles=None):
    """Each config's median and quantiles (ms) over every call made in _BENCH_S seconds."""
    times, end = [], time.perf_counter() + _BENCH_S
    while time.perf_counter() < end:
        start = time.perf_counter()
        kernel_call()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    at = [times[int(q * (len(times) - 1))] for q in (quantiles or (0.5,))]
    return at if quantiles else at[0]


@triton.autotune(configs=[triton.Config({"BLOCK": 2**k}) for k in range(15, 7, -1)], key=["n"], do_bench=patient_bench)
@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
        return y
