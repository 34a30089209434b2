"""evaluation_tallies: each board's best chosen among each solution's latest verdict there

A solution whose latest verdict on a board is not correct is no longer that board's best (standings.rebest): the
tallies' bests stored before are chosen again that way. No column changes.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

BOARD = ("device_name", "size", "precision")

# The tables as this revision knows them (not db.models, which moves on with later revisions).
solutions = sa.table("solutions", sa.column("id"), sa.column("problem_id"))
evaluations = sa.table("evaluations", *map(sa.column, ("id", "solution_id", "status", "speedup", "created_at", *BOARD)))
tallies = sa.table("evaluation_tallies", *map(sa.column, ("problem_id", "status", "best_id", *BOARD)))


def upgrade() -> None:
    _choose_bests(latest_only=True)


def downgrade() -> None:
    """The bests as chosen before: among every correct evaluation, superseded or not."""
    _choose_bests(latest_only=False)


def _choose_bests(latest_only: bool) -> None:
    """Each correct tally's best: the highest speedup > 0, earliest on ties, among its board's correct evaluations
    (latest_only: those no later verdict of their solution on the board superseded)."""
    later = evaluations.alias("later")
    superseded = sa.exists().where(later.c.solution_id == evaluations.c.solution_id, later.c.id > evaluations.c.id,
                                   *(later.c[k] == evaluations.c[k] for k in BOARD))
    best = (
        sa.select(evaluations.c.id)
        .select_from(evaluations.join(solutions, evaluations.c.solution_id == solutions.c.id))
        .where(solutions.c.problem_id == tallies.c.problem_id, *(evaluations.c[k] == tallies.c[k] for k in BOARD),
               evaluations.c.status == "correct", evaluations.c.speedup > 0, *([~superseded] if latest_only else []))
        .order_by(evaluations.c.speedup.desc(), evaluations.c.created_at, evaluations.c.id)
        .limit(1)
        .scalar_subquery()
    )
    op.execute(tallies.update().where(tallies.c.status == "correct").values(best_id=best))
