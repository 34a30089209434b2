"""generation_reuses: each stored answer a run was given again instead of a paid call

A row names the reused call (generation_id) and the run that took it, so the evolution trace marks the answers that
cost nothing. Nothing stored before changes: reuses before this revision were never recorded.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "generation_reuses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generation_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["generation_id"], ["generations.id"],
                                name=op.f("fk_generation_reuses_generation_id_generations")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_generation_reuses_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_generation_reuses")),
        sa.UniqueConstraint("generation_id", "run_id", name=op.f("uq_generation_reuses_generation_id_run_id")),
    )


def downgrade() -> None:
    op.drop_table("generation_reuses")
