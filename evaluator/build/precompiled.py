"""A kforge-owned precompiled torch/extension.h, so a small C++ candidate does not parse all of torch again.

GCC looks for `X.gch` in each include directory just before it looks for `X` there, and uses it when it was
built with compatible options (else it silently reads the header). So for each toolchain and set of compile
flags we keep a directory `<build root>/pch/<key>/` holding `torch/extension.h.gch` and, next to it,
`torch/extension.h` (a link to torch's own header, which gcc falls back to when the .gch is missing or does
not fit), and add `-I<that directory>` to the candidate's extra_cflags: `-I` directories are searched before
torch's `-isystem` ones, and extra_cflags reach only the host C++ compile (never nvcc's .cu compile).

- The key covers torch (version, headers), the compiler (its --version and its cc1plus binary) and the
  exact flags torch puts on the main.cpp compile (read from the build.ninja torch writes), except
  `-DTORCH_EXTENSION_NAME=...`, which torch's headers never read. Every flag set gets its own .gch, built
  with exactly those flags, so the precompiled state is what the header would have produced.
- The .gch is built before the compile child starts, for the flag sets read statically from the candidate's
  load_inline calls, by a jailed compiler of its own, and published by the parent (evaluator/parent/buildcache.py):
  pch/ is read-only to every child. The parent os.replace()s it in under a non-blocking flock, so parallel
  compiles never see half a .gch, never build it twice and never delete one (one that finds the lock taken
  compiles without).
- `Headers.install` wraps load_inline/load in the compile and candidate children alike, so both write the
  same build.ninja: a changed command line would make ninja rebuild in the candidate child. The flag is added
  whether or not the .gch exists yet (gcc skips a missing -I directory), so it never depends on timing.
- What makes a candidate's compile differ from a plain one is only the extra `-I`: that directory's
  torch/extension.h is torch's header, and the .gch is used only if gcc accepts it.

Costs: a .gch is ~0.8 GB and takes about as long to build as one plain compile; at most
buildcache.MAX_VARIANTS flag sets get one per build root. GCC does not store template instantiation or code generation in a .gch: with
torch 2.13 and gcc 12 a TU that includes torch/extension.h still spends ~25 s of CPU in them at -O3.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache, wraps
from pathlib import Path

import torch
import torch.utils.cpp_extension as cpp_extension

from evaluator.build import lean_headers
from evaluator.static import parse

HEADER = "torch/extension.h"
_PROBE_NAME = "kforge_pch_probe"
# Flags that change where headers come from (a candidate may write those directories at import), what gcc does
# with them, or which program it runs (-wrapper): such a candidate compiles as before, without the precompiled header.
_UNSAFE_PREFIXES = ("-wrapper", "-I", "-isystem", "-iquote", "-idirafter", "-include", "-imacros", "-iprefix", "-iwithprefix",
                    "-isysroot", "--sysroot", "-nostdinc", "-B", "-specs", "--specs", "-fplugin", "-x", "-o", "-M",
                    "-E", "-S", "-save-temps", "@")
_INCLUDE_ENV = ("CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH", "DEPENDENCIES_OUTPUT",
                "SUNPRO_DEPENDENCIES")
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+=,:-]+$")  # torch pastes extra_cflags into build.ninja unquoted
_MAIN_FAILED = re.compile(r"FAILED: (\[code=\d+\] )?main\.o\b")  # ninja's line for the binding's object
_PLAIN_WORD = re.compile(r"^[A-Za-z0-9_=+,.:/%-]+$")  # no shell or ninja syntax: the .gch build runs them verbatim


builds: list[str] = []  # how each lean main.cpp of this process went: "main.cpp lean binding", "main.cpp lean" or "main.cpp full: why"


@dataclass(frozen=True)
class Variant:
    """One precompiled header: the compiler, the exact flags, and the directory that holds it."""

    cxx: tuple[str, ...]
    flags: tuple[str, ...]
    key: str
    directory: Path
    binding: bool = False  # the header is lean_headers.binding_header(), not torch's own

    @property
    def header(self) -> Path:
        return self.directory / HEADER

    @property
    def gch(self) -> Path:
        return self.directory / (HEADER + ".gch")

    @property
    def include_flag(self) -> str:
        return f"-I{self.directory}"


# -- what torch would run -------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _ninja_compile(extra_cflags: tuple[str, ...], with_cuda: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(compiler, flags) of torch's main.cpp compile, read from the build.ninja torch itself writes."""
    with tempfile.TemporaryDirectory(prefix="kforge-pch-") as tmp:
        path = os.path.join(tmp, "build.ninja")
        cpp_extension._write_ninja_file_to_build_library(
            path=path, name=_PROBE_NAME, sources=[os.path.join(tmp, "main.cpp")], extra_cflags=list(extra_cflags),
            extra_cuda_cflags=[], extra_sycl_cflags=[], extra_ldflags=[], extra_include_paths=[], with_cuda=with_cuda,
            with_sycl=False, is_standalone=False)
        lines = dict(line.split(" = ", 1) for line in Path(path).read_text().splitlines() if " = " in line)
    flags = tuple(f for f in shlex.split(lines["cflags"]) if not f.startswith("-DTORCH_EXTENSION_NAME="))
    return tuple(shlex.split(lines["cxx"])), flags


@lru_cache(maxsize=None)
def _toolchain(cxx: tuple[str, ...]) -> dict | None:
    """What identifies the compiler (None unless it is GCC: other compilers' precompiled headers differ)."""
    if not sys.platform.startswith("linux") or not cpp_extension.check_compiler_is_gcc(cxx[0]):
        return None
    env = {**os.environ, "LC_ALL": "C"}
    version = subprocess.run([*cxx, "--version"], capture_output=True, text=True, env=env, timeout=60).stdout
    cc1plus = subprocess.run([*cxx, "-print-prog-name=cc1plus"], capture_output=True, text=True, env=env, timeout=60).stdout.strip()
    stat = os.stat(cc1plus) if os.path.isabs(cc1plus) else None
    return {"cxx": list(cxx), "version": version.splitlines()[:1], "cc1plus": [cc1plus, stat and stat.st_size, stat and stat.st_mtime_ns]}


def _torch_header() -> Path:
    return Path(cpp_extension.include_paths("cpu")[0]) / HEADER


def _safe_words(extra_cflags) -> tuple[str, ...] | None:
    """The candidate's extra_cflags as torch will use them, or None when a precompiled header must not be used."""
    if extra_cflags is None:
        return ()
    if not isinstance(extra_cflags, (list, tuple)) or not all(isinstance(f, str) for f in extra_cflags):
        return None
    try:
        words = shlex.split(" ".join(f.strip() for f in extra_cflags))
    except ValueError:
        return None
    if any(w.startswith(_UNSAFE_PREFIXES) or not _PLAIN_WORD.match(w) for w in words):
        return None
    return tuple(f.strip() for f in extra_cflags)


def variant(root: Path, extra_cflags, with_cuda: bool, binding: bool = False) -> Variant | None:
    """The precompiled header for a build with these extra_cflags, or None when none may be used; `binding`: the
    lean header of a main.cpp that only declares (lean_headers.binding_header)."""
    flags = _safe_words(extra_cflags)
    if flags is None or any(os.environ.get(name) for name in _INCLUDE_ENV):
        return None
    cxx, cflags = _ninja_compile(flags, bool(with_cuda))
    toolchain = _toolchain(cxx)
    if toolchain is None:
        return None
    header = _torch_header()
    stat = header.stat()
    material = {"torch": torch.__version__, "git": torch.version.git_version, "header": [str(header), stat.st_size, stat.st_mtime_ns],
                "toolchain": toolchain, "flags": list(cflags), "binding": binding and lean_headers.binding_header()}
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:24]
    directory = Path(os.path.abspath(root)) / "pch" / key
    if not _SAFE_PATH.match(str(directory)):
        return None
    return Variant(cxx=cxx, flags=cflags, key=key, directory=directory, binding=binding)


def replace_atomically(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _header_in_place(v: Variant) -> bool:
    if v.binding:
        return v.header.is_file() and not v.header.is_symlink() and v.header.read_text() == lean_headers.binding_header()
    return v.header.is_file() and os.path.realpath(v.header) == os.path.realpath(_torch_header())


def ensure_directory(v: Variant) -> bool:
    """The variant's include directory with its fallback header (torch's own, linked, or the binding's lean one,
    written); False if impossible."""
    try:
        if _header_in_place(v):
            return True
        v.header.parent.mkdir(parents=True, exist_ok=True)
        if v.binding:
            replace_atomically(v.header, lambda tmp: tmp.write_text(lean_headers.binding_header()))
        else:
            replace_atomically(v.header, lambda tmp: os.symlink(_torch_header(), tmp))
        flags_file = v.directory / "flags.json"
        if not flags_file.exists():
            replace_atomically(flags_file, lambda tmp: tmp.write_text(json.dumps({"cxx": v.cxx, "flags": v.flags}, indent=1)))
        return True
    except OSError:
        return False


# -- which flag sets a candidate will use, read without running it -----------------------------------------------

def _literal(node: ast.AST | None, assigned: dict[str, ast.AST]):
    if isinstance(node, ast.Name) and node.id in assigned:
        node = assigned[node.id]
    return ast.literal_eval(node) if node is not None else None


def _cuda_sources_given(node: ast.AST | None, assigned: dict[str, ast.AST]) -> bool:
    try:
        return bool(_literal(node, assigned))
    except (ValueError, TypeError, SyntaxError):
        return True  # not a literal: some expression, most likely a non-empty source


def _binds_declarations(args: dict, assigned: dict[str, ast.AST]) -> bool:
    """Whether a load_inline call's main.cpp is a binding of declarations (Headers.binding decides it the same way)."""
    try:
        return _literal(args.get("functions"), assigned) is not None and lean_headers.declarations_only(_literal(args.get("cpp_sources"), assigned))
    except (ValueError, TypeError, SyntaxError):
        return False


def _lean_code(args: dict, assigned: dict[str, ast.AST]) -> bool:
    """Whether a load_inline call's main.cpp holds code that builds lean (Headers.include_flag decides it the same way)."""
    try:
        return lean_headers.lean_code(_literal(args.get("cpp_sources"), assigned), _literal(args.get("functions"), assigned),
                                      _literal(args.get("extra_cflags"), assigned)) is not None
    except (ValueError, TypeError, SyntaxError):
        return False


def predicted_builds(source: str) -> list[tuple[tuple[str, ...], bool, bool]]:
    """(extra_cflags, with_cuda, binding) of each load_inline call whose arguments are literals (or names
    assigned a literal at module level), in the candidate's source. Others are simply not predicted."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return []
    names, assigned = {"load_inline"}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "torch.utils.cpp_extension":
            names |= {a.asname or a.name for a in node.names if a.name == "load_inline"}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node.value
    signature = inspect.signature(cpp_extension.load_inline)  # through kforge's wrappers (functools.wraps)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if not ((isinstance(func, ast.Name) and func.id in names) or (isinstance(func, ast.Attribute) and func.attr == "load_inline")):
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            continue
        try:
            args = signature.bind(*node.args, **{k.arg: k.value for k in node.keywords}).arguments
            if _literal(args.get("extra_include_paths"), assigned) or _literal(args.get("sycl_sources"), assigned):
                continue
            flags = _safe_words(_literal(args.get("extra_cflags"), assigned))
            with_cuda = _literal(args.get("with_cuda"), assigned)
            if with_cuda is None:
                with_cuda = _cuda_sources_given(args.get("cuda_sources"), assigned)
        except (TypeError, ValueError, SyntaxError):
            continue
        binding = _binds_declarations(args, assigned)
        if not binding and _lean_code(args, assigned):
            continue  # its main.cpp builds against a lean header of its own: no precompiled header to build
        build = (flags, bool(with_cuda), binding)
        if flags is not None and build not in found:
            found.append(build)
    return found


# -- the child's side -----------------------------------------------------------------------------------------

class Headers:
    """The precompiled headers under one build root, as one evaluator child uses them (read-only: the parent
    builds them, evaluator/parent/buildcache.py)."""

    def __init__(self, build_root: Path):
        self.root = Path(build_root)

    def install(self) -> None:
        """Wrap load_inline and load: an eligible build gets `-I<variant directory>` appended to extra_cflags."""
        for name in ("load_inline", "load"):
            loader = getattr(cpp_extension, name)
            setattr(cpp_extension, name, self._injecting(loader, inline=name == "load_inline"))

    def include_flag(self, arguments: dict, inline: bool) -> tuple[str | None, str]:
        """The flag to add for a call with these (bound) arguments (or None), and which lean main.cpp it builds
        ('binding', 'code', or '' for torch's own header, precompiled)."""
        if arguments.get("extra_include_paths") or arguments.get("sycl_sources") or arguments.get("with_sycl") \
                or arguments.get("is_standalone"):
            return None, ""
        with_cuda = arguments.get("with_cuda")
        if with_cuda is None:  # as torch decides it
            sources = arguments.get("sources") or []
            with_cuda = bool(arguments.get("cuda_sources")) if inline else \
                any(map(cpp_extension._is_cuda_file, [sources] if isinstance(sources, str) else sources))
        if inline and not self._main_failed(arguments).exists():
            if self.binds_declarations(arguments, inline):
                v = variant(self.root, arguments.get("extra_cflags"), bool(with_cuda), binding=True)
                if v and _header_in_place(v):  # published by the parent: without it gcc would quietly read torch's
                    return v.include_flag, "binding"
            elif _safe_words(arguments.get("extra_cflags")) is not None and (flag := lean_headers.main_flag(arguments)):
                return flag, "code"
        v = variant(self.root, arguments.get("extra_cflags"), bool(with_cuda))
        return (v.include_flag if v else None), ""  # whether or not the .gch exists yet: gcc skips a missing -I dir

    @staticmethod
    def _main_failed(arguments: dict) -> Path:
        return lean_headers.build_directory(arguments) / lean_headers.DIRECTORY / lean_headers.MAIN_FULL

    @staticmethod
    def binds_declarations(arguments: dict, inline: bool) -> bool:
        """A load_inline whose main.cpp only binds declared functions is built against the lean binding header,
        which the parent precompiles."""
        return inline and arguments.get("functions") is not None and lean_headers.declarations_only(arguments.get("cpp_sources"))

    def _injecting(self, loader, inline: bool):
        signature = inspect.signature(loader)

        def build(args: tuple, kwargs: dict, retried: bool):
            try:
                bound = signature.bind(*args, **kwargs)
                flag, lean = self.include_flag(bound.arguments, inline)
                failed = self._main_failed(bound.arguments) if inline else None
                what = "lean binding" if self.binds_declarations(bound.arguments, inline) else "lean build"
            except Exception:  # noqa: BLE001 - let torch report a bad call exactly as it would have
                flag, lean, failed, what = None, "", None, ""
            if not lean and not retried and failed is not None and failed.exists():  # said again at every later load
                builds.append(f"main.cpp full: the {what} failed ({failed.read_text().strip()})")
            if flag is None:
                return loader(*args, **kwargs)
            bound.arguments["extra_cflags"] = [*(bound.arguments.get("extra_cflags") or []), flag]
            if not lean:
                return loader(*bound.args, **bound.kwargs)
            said = "main.cpp lean binding" if lean == "binding" else "main.cpp lean"
            try:
                module = loader(*bound.args, **bound.kwargs)
            except RuntimeError as exc:
                if not _MAIN_FAILED.search(str(exc)):  # not main.cpp's compile: the full headers would fail the same way
                    builds.append(said)
                    raise
                error = lean_headers.build_as_written(exc, "main.cpp", failed, bound.arguments["name"])
                builds.append(f"main.cpp full: the {what} failed ({error})")
                return build(args, kwargs, retried=True)
            builds.append(said)
            return module

        @wraps(loader)
        def load(*args, **kwargs):
            return build(args, kwargs, retried=False)
        return load
