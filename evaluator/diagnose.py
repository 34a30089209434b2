"""Name the likely root cause of a failure from its log: the errors LLM kernels make again and again."""

from __future__ import annotations

import re

INT32_MAX = 2**31 - 1

# (pattern over the error text, hint). First match wins; keep the most specific first.
_RULES: list[tuple[re.Pattern, str]] = [
    (re.compile(r"getCurrentCUDAStream.*(not a member|not declared|has not been declared)|"
                r"(not a member|has no member|has not been declared).*getCurrentCUDAStream", re.S),
     "missing header: at::cuda::getCurrentCUDAStream needs #include <ATen/cuda/CUDAContext.h>"),
    (re.compile(r"missing 1 required positional argument: 'cpp_sources'"),
     "load_inline() was called without cpp_sources: it needs the C++ declarations of the bound functions"),
    (re.compile(r"error: \W(\w+)\W was not declared in this scope[^\n]*\n[^\n]*m\.def\("),  # in the generated binding
     "a function listed in load_inline(functions=...) is not declared in cpp_sources (empty or missing declaration)"),
    (re.compile(r"'module' object is not callable"),
     "the code calls the compiled extension module itself; call one of its functions (module.fn(...))"),
    (re.compile(r"name '(math|F|np|torch|nn)' is not defined"),
     "a missing import in the candidate file"),
    (re.compile(r"[Ee]xpected all tensors to be on the same device|Expected .*cuda.* but got .*cpu", re.S),
     "tensors on different devices: the candidate mixes CPU and CUDA tensors"),
]


def hint_for(text: str, max_input_numel: int = 0) -> str:
    """The first matching known cause, or an int32-overflow hint for illegal accesses on >2^31-element inputs."""
    for pattern, hint in _RULES:
        if pattern.search(text):
            return hint
    if re.search(r"illegal memory access|misaligned address|out of bounds", text) and max_input_numel > INT32_MAX:
        return (f"32-bit index overflow: an input has {max_input_numel:,} elements (> INT32_MAX = {INT32_MAX:,}); "
                "int indices wrap around, index with int64_t")
    return ""


def first_error(log: str) -> str:
    """The first compiler diagnostic of a build log ("file:line: error: ...", "fatal error: ..."), for one line of
    evidence; a command line's "-Wno-error" is not one."""
    return next((line.strip() for line in log.splitlines() if "error:" in line), "no error line")[:300]


def error_lines(log: str, limit: int = 20) -> str:
    """The compiler's error lines (and the line after each), the part of a build log a human needs."""
    lines = log.splitlines()
    keep = []
    for i, line in enumerate(lines):
        if re.search(r"\berror\b", line):  # compiler diagnostics (gcc "error:", nvcc "error:"), not "Error building"
            keep.extend(lines[i:i + 2])
        if len(keep) >= limit:
            break
    return "\n".join(dict.fromkeys(keep))
