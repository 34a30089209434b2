"""The smallest torch headers a load_inline CUDA source needs, so nvcc does not parse all of torch three times.

nvcc's host front end (cudafe++), its device front end (cicc) and the host compiler each read the whole
translation unit. With <torch/extension.h> (load_inline also puts <torch/types.h> at the top of the .cu) that is
~400,000 preprocessed lines: a copy kernel's .cu took 63 s on a 2-core VM (cudafe++ 19.5 s, cicc 20.8 s, the host
compile 18.8 s), and 13.8 s against <ATen/core/Tensor.h> and the one ATen operator header it calls
(benchmarks/compile_stages.py prints the table for any set of candidates).

How: the extension's build directory gets `kforge_lean/torch/extension.h` and `kforge_lean/torch/types.h`, both
the lean set below, and the .cu's flags (extra_cuda_cflags only) get `-I` to that directory: gcc and nvcc search
-I directories before torch's -isystem ones, so the candidate's source is compiled as written, with its own
includes. The lean set: at::Tensor and its methods (ATen/core/Tensor.h), ATen/Dispatch.h, one ATen/ops/<op>.h
per operator the source calls as torch::op or at::op (or unqualified under `using namespace`), a few standard
headers, and what torch/types.h puts in namespace torch (`using namespace at`, the dtype aliases). A source that
includes ATen/cuda/CUDAContext.h only for the current stream, CUDA's checks and device queries (the usual launcher)
gets a lean one beside them (CONTEXT), without cuBLAS, cuSPARSE, cuSOLVER and ATen/Context.h.

- What differs from the full headers: torch::empty_like and torch's other factories are at::'s, which differ
  only in autograd wrapping (the outputs of a forward under no_grad are the same). A source that needs what only
  the full headers give is built with them at once: pybind11, torch::nn/autograd/jit and the like,
  requires_grad, torch::tensor (whose dtype for a list of doubles differs from at::tensor's), any other torch/
  header, or flags that change where headers come from.
- A lean build whose .cu does not compile is built again as written, and a marker (`kforge_lean/full`, with the
  first error) makes every later load of the extension, the candidate's own child included, take the same
  build: ninja never rebuilds it there. Both builds run in the compile child, inside the sandbox.
- The device code is the candidate's own either way: its kernels include nothing of torch's that the lean set
  leaves out without failing to compile. benchmarks/compile_stages.py compares both builds' SASS.
"""

from __future__ import annotations

import inspect
import re
from functools import lru_cache, wraps
from pathlib import Path

import torch.utils.cpp_extension as cpp_extension

from evaluator.diagnose import first_error

DIRECTORY = "kforge_lean"
VERSION = "lean-5"  # part of the build cache's key: a build made another way is another build
_FULL_MARKER = "full"
MAIN_FULL = "main-full"  # a lean build of this extension's main.cpp failed: it is built as written from then on
_PARALLEL = re.compile(r"\bparallel_(for|reduce)\b")
_UMBRELLAS = ("torch/extension.h", "torch/types.h")
_NEEDS_FULL = re.compile(r"\b(pybind11|PYBIND11_\w+|py::|requires_grad|TORCH_LIBRARY\w*)|\btorch::(nn|autograd|jit|optim|data|"
                         r"python|serialize|cuda|tensor|Library|save|load|NoGradGuard|InferenceMode)\b")
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
_QUALIFIED_CALL = re.compile(r"\b(?:torch|at)\s*::\s*(\w+)\s*(?:<[^<>();]*>\s*)?\(")
_UNQUALIFIED_CALL = re.compile(r"(?<![\w.:>])(\w+)\s*\(")
_USING = re.compile(r"\busing\s+namespace\s+(?:torch|at)\s*;")
_CU_FAILED = re.compile(r"FAILED: (\[code=\d+\] )?cuda\.cuda\.o\b")  # ninja's line for the .cu's object
# What ATen's per-operator headers include and their inline wrappers never use: ~60 % of a lean .cu's front-end
# work. Each operator header a lean build calls is written into the lean directory without them.
_UNUSED_BY_OPS = ("#include <ATen/Context.h>", "#include <ATen/DeviceGuard.h>")
_STANDARD = ("algorithm", "cmath", "cstdint", "iostream", "string", "vector")
_ALIASES = ("Dtype = at::ScalarType", "kUInt8 = at::kByte", "kInt8 = at::kChar", "kInt16 = at::kShort",
            "kInt32 = at::kInt", "kInt64 = at::kLong", "kUInt16 = at::kUInt16", "kUInt32 = at::kUInt32",
            "kUInt64 = at::kUInt64", "kFloat16 = at::kHalf", "kFloat32 = at::kFloat", "kFloat64 = at::kDouble",
            "kU8 = kUInt8", "kU16 = kUInt16", "kU32 = kUInt32", "kU64 = kUInt64", "kI8 = kInt8", "kI16 = kInt16",
            "kI32 = kInt32", "kI64 = kInt64", "kF16 = kFloat16", "kF32 = kFloat32", "kF64 = kFloat64")
# ATen/cuda/CUDAContext.h gives the current stream, CUDA's checks and device queries, and with them cuBLAS, cuSPARSE,
# cuSOLVER and ATen/Context.h: a source that uses none of those (the usual kernel's launcher takes only the stream)
# gets CONTEXT in its place, the same declarations from the c10 headers that hold them.
_CONTEXT = "ATen/cuda/CUDAContext.h"
_NEEDS_CONTEXT = re.compile(r"\b(cublas\w*|cusparse\w*|cusolver\w*|cudss\w*|CUBLAS_\w+|CUSPARSE_\w+|\w*Handle|\w*Workspace\w*|"
                            r"getCUDADeviceAllocator|canDeviceAccessPeer|getNumGPUs|is_available|globalContext|"
                            r"Context|AT_CUDA_DRIVER_CHECK)\b")
CONTEXT = """#pragma once
// kforge: the part of ATen/cuda/CUDAContext.h this source uses (evaluator/child/lean_headers.py)
#include <cuda_runtime_api.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#define AT_CUDA_CHECK(EXPR) C10_CUDA_CHECK(EXPR)
namespace at::cuda {
TORCH_CUDA_CPP_API cudaDeviceProp* getCurrentDeviceProperties();
TORCH_CUDA_CPP_API int warp_size();
TORCH_CUDA_CPP_API cudaDeviceProp* getDeviceProperties(c10::DeviceIndex device);
}  // namespace at::cuda
"""
# Flags after which headers may come from elsewhere or mean something else: the build is left as written.
_HEADER_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter", "-include", "-imacros", "--include-path", "--pre-include",
                 "--system-include", "-x", "--x", "-E", "-M", "@", "-ccbin", "--compiler-bindir", "-Xcompiler",
                 "--compiler-options", "-Xcudafe")

builds: list[str] = []  # how each load_inline call of this process was built: "lean" or "full: why"


def _ops_directory() -> Path:
    return Path(cpp_extension.include_paths()[0]) / "ATen" / "ops"


@lru_cache(maxsize=1)
def _operators() -> frozenset[str]:
    """Names with an ATen per-operator header (ATen/ops/<name>.h)."""
    return frozenset(p.stem for p in _ops_directory().glob("*.h"))


def _operator_header(op: str) -> str:
    """torch's ATen/ops/<op>.h, as it is but for the includes its wrappers do not use."""
    lines = (_ops_directory() / f"{op}.h").read_text().splitlines()
    return "\n".join(line for line in lines if line.strip() not in _UNUSED_BY_OPS) + "\n"


def why_full(source: str, flags: list[str]) -> str | None:
    """Why this CUDA source is built with the full headers, or None when the lean set may do."""
    if found := _NEEDS_FULL.search(source):
        return f"uses {found.group(0)}"
    if other := [h for h in _INCLUDE.findall(source) if h.startswith("torch/") and h not in _UMBRELLAS]:
        return f"includes {other[0]}"
    if flag := next((f for f in flags if f.startswith(_HEADER_FLAGS)), None):
        return f"its nvcc flags set {flag}"
    return None


def lean_context(source: str) -> bool:
    """Whether this source includes ATen/cuda/CUDAContext.h and uses nothing of it beyond CONTEXT."""
    return _CONTEXT in _INCLUDE.findall(source) and not _NEEDS_CONTEXT.search(source)


def operators_called(source: str) -> list[str]:
    """The ATen operators this source calls as torch::op or at::op (or unqualified under `using namespace`)."""
    called = set(_QUALIFIED_CALL.findall(source))
    if _USING.search(source):
        called |= set(_UNQUALIFIED_CALL.findall(source))
    return sorted(called & _operators())


def lean_header(ops: list[str]) -> str:
    """The text of the lean torch/extension.h (and torch/types.h) for a source calling these operators."""
    lines = ["#pragma once", "// kforge: the torch headers this source uses (evaluator/child/lean_headers.py)",
             "#include <ATen/core/Tensor.h>", "#include <ATen/Dispatch.h>",
             *(f"#include <{h}>" for h in _STANDARD), *(f"#include <ATen/ops/{op}.h>" for op in ops),
             "namespace torch {", "using namespace at;  // NOLINT (as torch/types.h)",
             *(f"{'using' if a.startswith('Dtype') else 'constexpr auto'} {a};" for a in _ALIASES), "}  // namespace torch"]
    return "\n".join(lines) + "\n"


def main_header(ops: list[str], parallel: bool = False) -> str:
    """The lean torch/extension.h of a load_inline main.cpp: the lean set for the code in its cpp_sources (and
    ATen/Parallel.h, which torch/extension.h gives, when it calls at::parallel_for), then pybind11 with torch's
    casters (torch::wrap_pybind_function included), for the binding load_inline appends."""
    return (lean_header(ops) + ("#include <ATen/Parallel.h>\n" if parallel else "")
            + "#include <torch/csrc/utils/pybind.h>\n#include <torch/csrc/Exceptions.h>\n")


def binding_header() -> str:
    """The lean torch/extension.h of a main.cpp that only declares its functions: none of torch's C++ API."""
    return main_header([])


def source_text(sources) -> str | None:
    """load_inline's cpp_sources or cuda_sources as one text (a string, or a list or tuple of strings); None for
    anything else, which is built as written."""
    if isinstance(sources, str):
        return sources
    if isinstance(sources, (list, tuple)) and all(isinstance(s, str) for s in sources):
        return "\n".join(sources)
    return None


def declarations_only(cpp_sources) -> bool:
    """Whether load_inline's cpp_sources only declare (no body, nothing that needs the full headers): its main.cpp
    is then the pybind11 binding alone, and its machine code holds none of the candidate's own."""
    text = source_text(cpp_sources or "")
    if text is None:
        return False
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    return "{" not in code and "#define" not in code and why_full(code, []) is None


def lean_code(cpp_sources, functions, extra_cflags) -> str | None:
    """The code of a load_inline main.cpp that may build against a lean header of its own (a C++ kernel, a CUDA
    launcher), or None when it is built as written: no functions to bind, code that needs the full headers, flags
    that move headers."""
    text = source_text(cpp_sources)
    flags = extra_cflags or []
    if not text or functions is None or not isinstance(flags, (list, tuple)) or why_full(text, [str(f) for f in flags]):
        return None
    return text


def main_flag(arguments: dict) -> str | None:
    """The -I flag of the lean header written for a main.cpp's own code into the build's lean directory (None:
    built as written). Its operators' headers go beside it, as for a .cu."""
    text = None if arguments.get("no_implicit_headers") else \
        lean_code(arguments.get("cpp_sources"), arguments.get("functions"), arguments.get("extra_cflags"))
    if text is None:
        return None
    ops = operators_called(text)
    main = build_directory(arguments) / DIRECTORY / "main"
    _write_umbrellas(main, main_header(ops, bool(_PARALLEL.search(text))))
    for op in ops:
        _write_if_changed(main / "ATen" / "ops" / f"{op}.h", _operator_header(op))
    return f"-I{main}"


def _write_umbrellas(directory: Path, header: str) -> None:
    """torch/extension.h as `header`, and torch/types.h as the same header: a source may include either or both
    (torch's own torch/types.h beside a lean extension.h would define torch's dtype aliases twice). One file,
    included by the other: two files of the same text are one to #pragma once only while their mtimes match."""
    _write_if_changed(directory / _UMBRELLAS[0], header)
    _write_if_changed(directory / _UMBRELLAS[1], f"#pragma once\n#include <{_UMBRELLAS[0]}>\n")


def _write_if_changed(path: Path, text: str) -> None:
    """Same content, same file: a rewritten header would have ninja rebuild a finished build."""
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def build_directory(arguments: dict) -> Path:
    given = arguments.get("build_directory")
    return Path(given) if given else Path(cpp_extension._get_build_directory(arguments["name"], False))


def _lean_flag(arguments: dict) -> tuple[str | None, str]:
    """(the -I flag for a lean build or None, why not)."""
    sources = arguments.get("cuda_sources")
    if not sources:
        return None, ""  # no .cu: nothing to say (main.cpp's build is precompiled.Headers')
    if arguments.get("no_implicit_headers") or arguments.get("with_sycl"):
        return None, "full: not a plain load_inline .cu"
    source = source_text(sources)
    if source is None:
        return None, "full: its cuda_sources are not strings"
    if reason := why_full(source, list(arguments.get("extra_cuda_cflags") or [])):
        return None, f"full: {reason}"
    lean = build_directory(arguments) / DIRECTORY
    if (lean / _FULL_MARKER).exists():
        return None, f"full: the lean build failed ({(lean / _FULL_MARKER).read_text().strip()})"
    ops = operators_called(source)
    _write_umbrellas(lean, lean_header(ops))
    for op in ops:
        _write_if_changed(lean / "ATen" / "ops" / f"{op}.h", _operator_header(op))
    context = lean / _CONTEXT
    if lean_context(source):
        _write_if_changed(context, CONTEXT)
    else:
        context.unlink(missing_ok=True)
    return f"-I{lean}", "lean"


def build_as_written(exc: Exception, source: str, marker: Path, name: str) -> str:
    """After a lean build of `source` (cuda.cu or main.cpp) failed: its first error, the build dir's path left out,
    written to `marker` so every later load of the extension takes the build as written; torch forgets the
    name's version, so the rebuild keeps the name (no _v1)."""
    error = re.sub(rf"^\S*/({re.escape(source)})", r"\1", first_error(str(exc)))
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(error + "\n")
    cpp_extension.JIT_EXTENSION_VERSIONER.entries.pop(name, None)
    return error


def install() -> None:
    """Wrap load_inline: a CUDA source that may build lean gets the lean flag; if its .cu does not compile that
    way, it is built again as written."""
    loader = cpp_extension.load_inline
    signature = inspect.signature(loader)

    @wraps(loader)
    def load_inline(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
            flag, how = _lean_flag(bound.arguments)
        except Exception as exc:  # noqa: BLE001 - let torch report a bad call exactly as it would have
            flag, how = None, f"full: {type(exc).__name__}"
        if flag is None:
            builds.extend([how] if how else [])
            return loader(*args, **kwargs)
        bound.arguments["extra_cuda_cflags"] = [*(bound.arguments.get("extra_cuda_cflags") or []), flag]
        try:
            module = loader(*bound.args, **bound.kwargs)
        except Exception as exc:
            if not (isinstance(exc, RuntimeError) and _CU_FAILED.search(str(exc))):
                builds.append("lean")  # not the .cu's compile (the link, the import): as written would fail the same way
                raise
            error = build_as_written(exc, "cuda.cu", Path(flag[2:]) / _FULL_MARKER, bound.arguments["name"])
            builds.append(f"full: the lean build failed ({error})")
            return loader(*args, **kwargs)
        builds.append("lean")
        return module

    cpp_extension.load_inline = load_inline
