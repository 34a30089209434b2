"""The program archive: islands, each a MAP-Elites grid (pipeline/features.py) of a problem's correct candidates,
stored in the db (archive_cells). Sample i of a turn works on island i mod islands; its parent comes from that
island by a seeded draw among three ways:
- exploit: the island's fastest elite;
- explore: an elite of a random cell of the island (diversity: a slower kernel with another technique);
- history: the island's latest elite, so an island keeps following its own line.
With probability `crossover` (an island with two elites or more) the parent gets a partner, another elite of the
island drawn at random, and the prompt asks to combine the two. A refine prompt also shows up to `inspirations`
other elites of the problem (any island): the fastest, then the fastest of each other cell, with their numbers.
With `contrast` R, it also shows a contrastive pair (CUDA-L1's idea): the fastest other elite and the slowest one
at least R times slower than it, and asks the model to say what makes the one faster before it writes code.
Every `migration_interval` turns each island's fastest elite is copied into the next island (a ring), where it
takes its cell if it is faster than what is there. Islands with no elite yet fall back to the loop's classic parent
(the best correct candidate of the problem, else its latest failure)."""

from __future__ import annotations

import random

from pydantic import BaseModel, Field, model_validator

from db import ArchiveRow, Database
from pipeline.features import cell_of

MODES = ("exploit", "explore", "history")


class ArchiveConfig(BaseModel):
    islands: int = Field(2, ge=1)
    migration_interval: int = Field(2, ge=1)  # turns between migrations
    exploit: float = Field(0.6, ge=0)  # weights of the three ways to pick a parent; they need not sum to 1
    explore: float = Field(0.2, ge=0)
    history: float = Field(0.2, ge=0)
    speedup_edges: list[float] = Field(default_factory=lambda: [1.0, 1.5, 2.0, 4.0], min_length=1)
    seed: int = 0
    crossover: float = Field(0.0, ge=0, le=1)  # probability that a pick gets a partner to combine with
    inspirations: int = Field(0, ge=0)  # other elites shown in a refine prompt
    contrast: float = Field(0.0, ge=0)  # R > 1: a refine prompt also shows two elites at least R times apart

    @model_validator(mode="after")
    def _some_weight(self) -> ArchiveConfig:
        if self.exploit + self.explore + self.history <= 0:
            raise ValueError("exploit, explore and history weights are all 0: no way to pick a parent")
        if 0 < self.contrast <= 1:
            raise ValueError(f"contrast {self.contrast:g}: a pair must be more than 1x apart (0: no pair)")
        return self


class Pick(BaseModel):
    member: ArchiveRow
    mode: str
    partner: ArchiveRow | None = None  # set for a crossover


def slot_rng(config: ArchiveConfig, problem: str, turn: int, sample: int) -> random.Random:
    """One generator per (problem, turn, sample): a draw does not depend on the order threads ran in, and a resumed
    run draws what the first session drew."""
    return random.Random(f"{config.seed}/{problem}/{turn}/{sample}")


def island_of(config: ArchiveConfig, sample: int) -> int:
    return sample % config.islands


def pick(members: list[ArchiveRow], config: ArchiveConfig, rng: random.Random) -> Pick | None:
    """A parent among one island's elites by the configured mix; None for an empty island."""
    if not members:
        return None
    mode = rng.choices(MODES, weights=[config.exploit, config.explore, config.history])[0]
    if mode == "exploit":
        member = max(members, key=lambda m: (m.speedup, m.updated_at))
    elif mode == "explore":
        member = rng.choice(sorted(members, key=lambda m: m.cell))
    else:
        member = max(members, key=lambda m: m.updated_at)
    others = sorted((m for m in members if m.solution_sha256 != member.solution_sha256), key=lambda m: m.cell)
    if config.crossover and others and rng.random() < config.crossover:  # no draw without crossover: seeds keep
        return Pick(member=member, mode=mode, partner=rng.choice(others))  # their sequences
    return Pick(member=member, mode=mode)


def inspirations(members: list[ArchiveRow], exclude: set[str], n: int) -> list[ArchiveRow]:
    """Up to n distinct elites not in exclude: the fastest, then the fastest of each cell not yet shown."""
    ranked = sorted(members, key=lambda m: (-m.speedup, m.cell))
    chosen, seen_cells, seen = [], set(), set(exclude)
    for first_pass in (True, False):
        for m in ranked:
            if len(chosen) == n:
                return chosen
            if m.solution_sha256 in seen or (first_pass and chosen and m.cell in seen_cells):
                continue
            chosen.append(m)
            seen.add(m.solution_sha256)
            seen_cells.add(m.cell)
    return chosen


def contrast(members: list[ArchiveRow], exclude: set[str], ratio: float) -> tuple[ArchiveRow, ArchiveRow] | None:
    """(slower, faster): the fastest elite not in exclude and the slowest at least `ratio` times slower, if any."""
    others = sorted((m for m in members if m.solution_sha256 not in exclude), key=lambda m: (-m.speedup, m.cell))
    if not others:
        return None
    fast = others[0]
    slow = next((m for m in reversed(others) if m.speedup * ratio <= fast.speedup), None)
    return None if slow is None or slow.solution_sha256 == fast.solution_sha256 else (slow, fast)


class Archive:
    """One problem's archive on one device and size, at one precision."""

    def __init__(self, database: Database, config: ArchiveConfig, problem: str, device_name: str, size: str,
                 precision: str = "fp32") -> None:
        self.database, self.config, self.precision = database, config, precision
        self.key = (problem, device_name, size)

    def members(self, island: int | None = None) -> list[ArchiveRow]:
        rows = self.database.archive(*self.key, precision=self.precision)
        return rows if island is None else [r for r in rows if r.island == island]

    def choose(self, turn: int, sample: int) -> Pick | None:
        rng = slot_rng(self.config, self.key[0], turn, sample)
        return pick(self.members(island_of(self.config, sample)), self.config, rng)

    def inspirations(self, exclude: set[str]) -> list[ArchiveRow]:
        return inspirations(self.members(), exclude, self.config.inspirations)

    def contrast(self, exclude: set[str]) -> tuple[ArchiveRow, ArchiveRow] | None:
        return contrast(self.members(), exclude, self.config.contrast) if self.config.contrast > 1 else None

    def place(self, island: int, source: str, solution_sha256: str, speedup: float) -> bool:
        """A correct candidate enters its island's grid if its cell is empty or it beats the cell's elite."""
        cell = cell_of(source, speedup, self.config.speedup_edges)
        return self.database.place_elite(*self.key, island, cell, solution_sha256, speedup, precision=self.precision)

    def migrate(self) -> list[tuple[int, int, str]]:
        """Each island's fastest elite goes to the next island; (from, to, sha256) of those that took a cell."""
        rows = self.members()
        moved = []
        for island in range(self.config.islands):
            own = [r for r in rows if r.island == island]
            if not own or self.config.islands == 1:
                continue
            best = max(own, key=lambda r: r.speedup)
            target = (island + 1) % self.config.islands
            if self.database.place_elite(*self.key, target, best.cell, best.solution_sha256, best.speedup,
                                         migrated_from=island, precision=self.precision):
                moved.append((island, target, best.solution_sha256))
        return moved
