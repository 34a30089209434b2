"""CuTe DSL and TileLang candidates (tests/candidates/cute/, tests/candidates/tilelang/) on a machine without a GPU:
each is read as its language from its code and `kforge evaluate` judges it `skipped` before anything runs, since
their kernels compile and run only on an NVIDIA GPU. The same files are what a GPU run judges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CANDIDATES, kforge_runner
from db import Database
from evaluator.languages import Language, found
from evaluator.static import check_source

KINDS = {"cute": Language.CUTE, "tilelang": Language.TILELANG}


def files(folder: str) -> list[Path]:
    return sorted((CANDIDATES / folder).rglob("*.py"))


@pytest.mark.parametrize("folder", KINDS)
def test_each_candidate_is_read_as_its_language_and_needs_a_gpu(folder):
    assert files(folder)
    for path in files(folder):
        source = path.read_text()
        assert found(source) == [KINDS[folder]], path
        check = check_source(source)
        assert check.status is None and check.language is KINDS[folder], (path, check)
        assert check.needs_cuda and not check.kernel_free, (path, check)


@pytest.mark.parametrize("folder", KINDS)
def test_kforge_evaluate_skips_them_on_cpu_and_stores_their_language(folder, tmp_path, build_root):
    kforge = kforge_runner(tmp_path, build_root)
    proc = kforge("evaluate", str(CANDIDATES / folder), "--device", "cpu", "--json")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert sorted(Path(line["path"]) for line in lines) == files(folder)
    for line in lines:
        assert line["status"] == "skipped", line
        assert line["cause"].startswith("skipped: no CUDA device"), line
    with Database(kforge.db_url) as db:
        assert [e.evidence["language"] for e in db.evaluations()] == [folder] * len(lines)
