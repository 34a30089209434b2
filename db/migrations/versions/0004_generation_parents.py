"""generation_parents: every call a prompt built on, in order (a crossover's two parents, not only the first)

A generation stored before this had at most one parent, its parent_generation_id: it becomes that generation's one
row at position 0, so old databases read as they did.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "generation_parents",
        sa.Column("generation_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("parent_generation_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["generation_id"], ["generations.id"],
                                name=op.f("fk_generation_parents_generation_id_generations")),
        sa.ForeignKeyConstraint(["parent_generation_id"], ["generations.id"],
                                name=op.f("fk_generation_parents_parent_generation_id_generations")),
        sa.PrimaryKeyConstraint("generation_id", "position", name=op.f("pk_generation_parents")),
    )
    op.execute("INSERT INTO generation_parents (generation_id, position, parent_generation_id) "
               "SELECT id, 0, parent_generation_id FROM generations WHERE parent_generation_id IS NOT NULL")


def downgrade() -> None:
    op.drop_table("generation_parents")
