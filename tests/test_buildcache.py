"""Publishing a compile child's build into the cache (evaluator/parent/buildcache.py), on real directories."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from evaluator.parent import buildcache


def _built(workdir: Path, key: str) -> None:
    """What a compile child leaves in its view: its build dir with a library."""
    build = buildcache.view_dir(workdir) / "upper" / key / "ext"
    build.mkdir(parents=True)
    (build / "ext.so").write_bytes(b"\x7fELF not really")


def test_a_build_is_published_and_a_killed_publishers_leftovers_are_swept(tmp_path):
    """A kforge killed mid-publish leaves `.incoming-<key>-*` in the cache; the next publisher of that key holds
    its lock, so nobody else is copying it: the leftover goes, another key's stays."""
    root, key = tmp_path / "builds", "a" * 24
    stale, other = root / f".incoming-{key}-999-1", root / f".incoming-{'b' * 24}-999-1"
    for d in (stale, other):
        (d / "ext").mkdir(parents=True)
    workdir = tmp_path / "cand00000" / "compile"
    workdir.mkdir(parents=True)
    _built(workdir, key)
    assert buildcache.publish(workdir, root / key)
    assert (root / key / "ext" / "ext.so").read_bytes() == b"\x7fELF not really"
    assert not stale.exists() and other.exists()
    assert not buildcache.view_dir(workdir).exists()  # the child's layer is removed once published


def test_a_key_is_compiled_by_one_at_a_time(tmp_path):
    build_dir = tmp_path / "builds" / "key"
    order: list[str] = []

    def second():
        with buildcache.compiling(tmp_path / "builds", build_dir):
            order.append("second")

    with buildcache.compiling(tmp_path / "builds", build_dir):
        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.3)
        order.append("first done")
    waiter.join(timeout=10)
    assert order == ["first done", "second"]
