"""precision: the dtype an evaluation ran at (fp32, fp16, bf16), in the key of its tally and of the archive's cells

fp32 and half-precision results never share a board: an evaluation's precision joins the tallies' key (problem,
device, size, precision, status) and the archive cells'. Every row stored before this ran at fp32, the only
precision there was, and says so.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# table -> its primary key without precision, in order; precision goes after size
KEYS = {"evaluation_tallies": ("problem_id", "device_name", "size", "status"),
        "archive_cells": ("problem_id", "device_name", "size", "island", "cell")}


def _with_precision(key: tuple[str, ...]) -> list[str]:
    at = key.index("size") + 1
    return [*key[:at], "precision", *key[at:]]


def upgrade() -> None:
    op.add_column("evaluations", sa.Column("precision", sa.String(), server_default="fp32", nullable=False))
    for table, key in KEYS.items():
        with op.batch_alter_table(table, recreate="always") as batch:  # SQLite changes a primary key by a rebuild
            batch.add_column(sa.Column("precision", sa.String(), server_default="fp32", nullable=False))
            batch.drop_constraint(f"pk_{table}", type_="primary")
            batch.create_primary_key(f"pk_{table}", _with_precision(key))


def downgrade() -> None:
    """Half-precision rows have no place in the older schema: they are dropped, and the tallies keep the fp32
    ones (the tallies then count fp32 evaluations only, as they did)."""
    for table, key in KEYS.items():
        op.execute(sa.text(f"DELETE FROM {table} WHERE precision != 'fp32'"))
        with op.batch_alter_table(table, recreate="always") as batch:
            batch.drop_constraint(f"pk_{table}", type_="primary")
            batch.drop_column("precision")
            batch.create_primary_key(f"pk_{table}", list(key))
    op.execute(sa.text("DELETE FROM evaluations WHERE precision != 'fp32'"))
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("precision")
