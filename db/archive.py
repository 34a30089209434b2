"""The program archive's storage: per problem, device, size, precision and island, the elite solution of each MAP-Elites cell.
What a cell or an island means is the caller's (pipeline/archive.py); here a cell is a name and an elite is the
fastest solution placed in it. A mixin of Database."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import joinedload

from db.engine import guarded, retry_on_conflict
from db.models import ArchiveCell, Evaluation, Solution, utcnow
from db.rows import ArchiveRow, EvaluationRow, archive_row, evaluation_row
from db.standings import problem_id_of


class ArchiveCells:
    """Read a problem's archive, place a candidate in a cell, find an evaluated twin of a candidate."""

    @guarded
    def archive(self, problem: str, device_name: str, size: str, *, precision: str = "fp32") -> list[ArchiveRow]:
        """Every elite of the problem on this device and size at this precision, by island then cell."""
        stmt = (select(ArchiveCell).options(joinedload(ArchiveCell.solution))
                .where(ArchiveCell.problem_id == problem_id_of(problem), ArchiveCell.device_name == device_name,
                       ArchiveCell.size == size, ArchiveCell.precision == precision)
                .order_by(ArchiveCell.island, ArchiveCell.cell))
        with self.session() as s, s.begin():
            return [archive_row(cell) for cell in s.scalars(stmt)]

    @guarded
    @retry_on_conflict
    def place_elite(self, problem: str, device_name: str, size: str, island: int, cell: str, solution_sha256: str,
                    speedup: float, migrated_from: int | None = None, *, precision: str = "fp32") -> bool:
        """The solution becomes the cell's elite if the cell is empty or it is strictly faster; True when it did."""
        with self.session(write=True) as s, s.begin():
            key = (self._problem_id_in(s, problem), device_name, size, precision, island, cell)
            solution_id = self._solution_in(s, solution_sha256).id
            row = s.get(ArchiveCell, key, with_for_update=True)
            if row is not None and row.speedup >= speedup:
                return False
            if row is None:
                s.add(ArchiveCell(problem_id=key[0], device_name=device_name, size=size, precision=precision,
                                  island=island, cell=cell,
                                  solution_id=solution_id, speedup=speedup, migrated_from=migrated_from))
            else:
                row.solution_id, row.speedup, row.migrated_from, row.updated_at = (solution_id, speedup, migrated_from,
                                                                                   utcnow())
            return True

    @guarded
    def find_twin_evaluation(self, problem: str, normalized_sha256: str, device_name: str,
                             size: str, *, precision: str = "fp32") -> EvaluationRow | None:
        """The latest verdict, on this device and size at this precision, of any solution of the problem with the
        same normalized code."""
        twins = select(Solution.id).where(Solution.normalized_sha256 == normalized_sha256,
                                          Solution.problem_id == problem_id_of(problem))
        stmt = (select(Evaluation)
                .where(Evaluation.solution_id.in_(twins), Evaluation.device_name == device_name, Evaluation.size == size,
                       Evaluation.precision == precision)
                .order_by(Evaluation.created_at.desc(), Evaluation.id.desc()).limit(1))
        with self.session() as s, s.begin():
            ev = s.scalar(stmt)
            return None if ev is None else evaluation_row(ev)
