"""evaluation_tallies: per problem, device, size and status, the number of evaluations and the best correct one

The aggregates (leaderboard, fast_p, geomean) read this small table instead of joining every evaluation to its
solution; Database.add_evaluation keeps it in step. The upgrade fills it from the evaluations already stored, then
drops ix_evaluations_board: no query reads evaluations by status and speedup any more, and on SQLite that index drew
add_evaluation's primary-key lookup of two rows into a scan of every correct evaluation.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

KEY = ("problem_id", "device_name", "size", "status")

# The tables as this revision knows them (not db.models, which moves on with later revisions).
solutions = sa.table("solutions", sa.column("id"), sa.column("problem_id"))
evaluations = sa.table("evaluations", *map(sa.column, ("id", "solution_id", "speedup", "created_at", *KEY[1:])))
tallies = sa.table("evaluation_tallies", *map(sa.column, (*KEY, "n", "best_id")))


def upgrade() -> None:
    op.create_table(
        "evaluation_tallies",
        sa.Column("problem_id", sa.Integer(), nullable=False),
        sa.Column("device_name", sa.String(), nullable=False),
        sa.Column("size", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("best_id", sa.Integer(), nullable=True),
        _fk("best_id", "evaluations"),
        _fk("problem_id", "problems"),
        sa.PrimaryKeyConstraint(*KEY, name=op.f("pk_evaluation_tallies")),
    )
    _backfill()
    op.drop_index("ix_evaluations_board", table_name="evaluations")  # only now: the backfill's lookups use it


def _fk(column: str, target: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint([column], [f"{target}.id"], name=op.f(f"fk_evaluation_tallies_{column}_{target}"))


def _backfill() -> None:
    """One grouped pass counts the stored evaluations; then each correct tally takes its best the way
    Database.add_evaluation would have chosen it (the highest speedup > 0, earliest on ties)."""
    joined = evaluations.join(solutions, evaluations.c.solution_id == solutions.c.id)
    key = (solutions.c.problem_id, *(evaluations.c[k] for k in KEY[1:]))
    counts = sa.select(*key, sa.func.count()).select_from(joined).group_by(*key)
    op.execute(tallies.insert().from_select([*KEY, "n"], counts))
    best = (
        sa.select(evaluations.c.id)
        .select_from(joined)
        .where(*(column == tallies.c[k] for column, k in zip(key, KEY, strict=True)), evaluations.c.speedup > 0)
        .order_by(evaluations.c.speedup.desc(), evaluations.c.created_at, evaluations.c.id)
        .limit(1)
        .scalar_subquery()
    )
    op.execute(tallies.update().where(tallies.c.status == "correct").values(best_id=best))


def downgrade() -> None:
    op.create_index("ix_evaluations_board", "evaluations", ["status", "speedup", "solution_id"])
    op.drop_table("evaluation_tallies")
