"""The program archive (islands of MAP-Elites grids) on a real SQLite file (and PostgreSQL when one is given): cells
are named by the documented feature axes, an elite is replaced only by a faster candidate, migration carries each
island's best to the next island, and parent selection follows the configured mix with a seeded generator."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from db import ArchiveRow, Database
from pipeline.archive import Archive, ArchiveConfig, contrast, pick, slot_rng
from pipeline.features import cell_of, speedup_bucket, technique, techniques

PLAIN = "import torch\nclass ModelNew: pass\n"
PARALLEL = 'src = r"""\nat::parallel_for(0, n, 1024, [&](int64_t b, int64_t e) {});\n"""\n' + PLAIN
SHARED = 'src = r"""\n__global__ void k() { __shared__ float tile[32][32]; }\n"""\n' + PLAIN
VECTOR = 'src = r"""\nconst float4* p = reinterpret_cast<const float4*>(x);  // float4 loads\n"""\n' + PLAIN


@pytest.fixture
def archive(url: str):
    """An archive of problem relu on one device, with solutions s0..s9 stored (sources set per test)."""
    with Database(url) as db:
        db.upsert_problem("relu", 1, "reference_problems/relu.py", "h")
        yield Archive(db, ArchiveConfig(islands=3, speedup_edges=[1.0, 2.0]), "relu", "cpu-x", "small")


def store(archive: Archive, sha: str, source: str) -> str:
    archive.database.upsert_solution(sha, "relu", source, origin="generated")
    return source


def cells(archive: Archive) -> dict[tuple[int, str], tuple[str, float, int | None]]:
    return {(m.island, m.cell): (m.solution_sha256, m.speedup, m.migrated_from) for m in archive.members()}


def test_feature_axes():
    assert [speedup_bucket(x, [1.0, 2.0]) for x in (0.5, 1.0, 1.9, 2.0, 7.0)] == ["<1", "1-2", "1-2", ">=2", ">=2"]
    assert [technique(s) for s in (PLAIN, PARALLEL, SHARED, VECTOR)] == ["plain", "parallel", "shared_memory", "vectorized"]
    assert techniques(SHARED + PARALLEL) == ["shared_memory", "tiling", "parallel"]  # `tile` names a tile array too
    assert technique("# we could use __shared__ memory here\n" + PLAIN) == "plain"  # comments are not code
    assert cell_of(VECTOR, 1.5, [1.0, 2.0]) == "1-2|vectorized"


def test_the_grid_fills_and_keeps_the_fastest_per_cell(archive):
    for sha, source, speedup in (("s0", PLAIN, 0.5), ("s1", PARALLEL, 1.5), ("s2", SHARED, 3.0), ("s3", PARALLEL, 1.2),
                                 ("s4", PARALLEL, 1.8)):
        archive.place(0, store(archive, sha, source), sha, speedup)
    assert cells(archive) == {(0, "<1|plain"): ("s0", 0.5, None), (0, "1-2|parallel"): ("s4", 1.8, None),
                              (0, ">=2|shared_memory"): ("s2", 3.0, None)}
    assert not archive.place(0, PARALLEL, "s1", 1.8)  # a tie does not displace the elite


def test_islands_stay_apart_until_migration_carries_each_best_to_the_next(archive):
    archive.place(0, store(archive, "a", SHARED), "a", 3.0)
    archive.place(0, store(archive, "b", PLAIN), "b", 0.5)
    archive.place(1, store(archive, "c", PARALLEL), "c", 1.5)
    assert {m.island for m in archive.members()} == {0, 1}  # placing in one island leaves the others alone
    moved = archive.migrate()
    assert moved == [(0, 1, "a"), (1, 2, "c")]  # island 2 was empty: nothing leaves it
    assert cells(archive) == {
        (0, "<1|plain"): ("b", 0.5, None), (0, ">=2|shared_memory"): ("a", 3.0, None),
        (1, "1-2|parallel"): ("c", 1.5, None), (1, ">=2|shared_memory"): ("a", 3.0, 0),
        (2, "1-2|parallel"): ("c", 1.5, 1),
    }
    # island 1's best is now the migrant a, which goes on round the ring, as does c; island 0 already has a
    assert archive.migrate() == [(1, 2, "a"), (2, 0, "c")]
    assert archive.migrate() == []  # every island holds every best: nothing moves


def member(cell: str, speedup: float, minutes: int) -> ArchiveRow:
    return ArchiveRow(problem="relu", device_name="cpu", size="small", island=0, cell=cell, solution_sha256=cell,
                      speedup=speedup, migrated_from=None, updated_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes))


MEMBERS = [member("best", 3.0, 0), member("latest", 1.0, 9), member("a", 2.0, 1), member("b", 0.5, 2)]


def test_selection_follows_the_configured_mix():
    config = ArchiveConfig(exploit=0.5, explore=0.3, history=0.2)
    rng = random.Random(7)
    picks = [pick(MEMBERS, config, rng) for _ in range(4000)]
    modes = Counter(p.mode for p in picks)
    assert {m: round(n / 4000, 1) for m, n in modes.items()} == {"exploit": 0.5, "explore": 0.3, "history": 0.2}
    assert {p.member.cell for p in picks if p.mode == "exploit"} == {"best"}
    assert {p.member.cell for p in picks if p.mode == "history"} == {"latest"}
    assert {p.member.cell for p in picks if p.mode == "explore"} == {"best", "latest", "a", "b"}  # any cell
    only_best = ArchiveConfig(exploit=1, explore=0, history=0)
    assert {pick(MEMBERS, only_best, rng).member.cell for _ in range(50)} == {"best"}
    assert pick([], config, rng) is None


def test_draws_are_seeded_per_slot():
    config = ArchiveConfig(exploit=1, explore=1, history=1, seed=3)
    draws = [pick(MEMBERS, config, slot_rng(config, "relu", turn, sample)).member.cell
             for turn in range(4) for sample in range(4)]
    again = [pick(MEMBERS, config, slot_rng(config, "relu", turn, sample)).member.cell
             for turn in reversed(range(4)) for sample in reversed(range(4))][::-1]
    assert draws == again and len(set(draws)) > 1
    other_seed = config.model_copy(update={"seed": 4})
    assert draws != [pick(MEMBERS, other_seed, slot_rng(other_seed, "relu", t, s)).member.cell
                     for t in range(4) for s in range(4)]


def test_a_contrastive_pair_is_the_fastest_other_elite_and_the_slowest_far_enough_below_it():
    pair = lambda exclude, ratio: tuple(m.cell for m in contrast(MEMBERS, exclude, ratio) or ())  # noqa: E731
    assert pair(set(), 2.0) == ("b", "best")  # 3x against 0.5x
    assert pair({"b"}, 2.0) == ("latest", "best")  # the parent (b) is not shown again
    assert pair({"best"}, 2.0) == ("b", "a")
    assert pair({"b", "latest"}, 2.0) == ()  # 3x and 2x: not twice apart
    assert pair({"best", "a", "latest"}, 1.0) == ()  # one elite left: no pair


def test_a_config_with_no_way_to_pick_is_refused():
    with pytest.raises(ValueError, match="all 0"):
        ArchiveConfig(exploit=0, explore=0, history=0)
