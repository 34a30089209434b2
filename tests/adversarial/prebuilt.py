"""One compiled kernel shared by many adversarial candidates, built once by the tests themselves.

A candidate file is built in a folder keyed on its own content, so each would recompile its own copy (~45 s
here). Instead the tests build the shared kernel before any candidate runs (`prebuild`, in a process of their
own, which they trust) into the build root's pch/ folder, the part of the cache every child reads and none
writes. A child loads it as it is: an up-to-date build writes nothing but torch's lock file, which the
read-only folder refuses, so the load goes without one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch.utils.cpp_extension as cpp_extension


class _NoLock:
    """torch's FileBaton for a build nobody writes: nothing to wait for, nothing to remove."""

    def __init__(self, *args, **kwargs):
        pass

    def try_acquire(self) -> bool:
        return True

    def release(self) -> None:
        pass


def shared_build_dir(name: str) -> Path:
    return Path(os.environ["TORCH_EXTENSIONS_DIR"]).parent / "pch" / name


def load_shared(folder: str, **load_inline_args):
    """load_inline into the shared folder: builds it in the tests' own process, loads it as it is in a child."""
    build_dir = shared_build_dir(folder)
    try:
        build_dir.mkdir(exist_ok=True)
        return cpp_extension.load_inline(build_directory=str(build_dir), **load_inline_args)
    except PermissionError:  # a child: pch/ is read-only (not built? run the tests' prebuild fixture first)
        baton, cpp_extension.FileBaton = cpp_extension.FileBaton, _NoLock
        try:
            return cpp_extension.load_inline(build_directory=str(build_dir), **load_inline_args)
        finally:
            cpp_extension.FileBaton = baton


def prebuild(build_root: Path, module: str) -> None:
    """Build `module`'s shared kernel the way a child loads it (a child's environment, kforge's precompiled-header
    flag added by the same wrapper), so the children find the build up to date."""
    from evaluator.sandbox.spawn import scrubbed_env

    scratch = build_root / ".prebuild"
    scratch.mkdir(parents=True, exist_ok=True)
    (build_root / "pch").mkdir(exist_ok=True)
    code = f"from evaluator.build.precompiled import Headers; Headers({str(build_root)!r}).install(); import {module}"
    subprocess.run([sys.executable, "-c", code], cwd=scratch, env=scrubbed_env(scratch, scratch, "prebuild"),
                   check=True, timeout=900)
