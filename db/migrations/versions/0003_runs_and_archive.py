"""runs, archive_cells, and the columns the agent loop needs: a generation's run, sample, island and prompt kind,
and a solution's normalized hash

A run is one `kforge generate` with its settings, status and wall seconds (its spend in tokens and dollars is the
sum of its generations); archive_cells holds, per problem, device, size and island, the elite solution of each
MAP-Elites cell. Existing generations belong to no run, were sample 0 and draft prompts; existing solutions have no
normalized hash (they are never matched as near-duplicates).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
RUN_FK = "fk_generations_run_id_runs"


def _fk(table: str, column: str, target: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint([column], [f"{target}.id"], name=op.f(f"fk_{table}_{column}_{target}"))


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("settings", JSON, nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("stop_reason", sa.Text(), nullable=False),
        sa.Column("wall_s", sa.Double(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_table(
        "archive_cells",
        sa.Column("problem_id", sa.Integer(), nullable=False),
        sa.Column("device_name", sa.String(), nullable=False),
        sa.Column("size", sa.String(), nullable=False),
        sa.Column("island", sa.Integer(), nullable=False),
        sa.Column("cell", sa.String(), nullable=False),
        sa.Column("solution_id", sa.Integer(), nullable=False),
        sa.Column("speedup", sa.Double(), nullable=False),
        sa.Column("migrated_from", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        _fk("archive_cells", "problem_id", "problems"),
        _fk("archive_cells", "solution_id", "solutions"),
        sa.PrimaryKeyConstraint("problem_id", "device_name", "size", "island", "cell", name=op.f("pk_archive_cells")),
    )
    op.add_column("generations", sa.Column("sample", sa.Integer(), server_default="0", nullable=False))
    _add_run_id()
    op.add_column("generations", sa.Column("island", sa.Integer(), nullable=True))
    op.add_column("generations", sa.Column("prompt_kind", sa.String(), server_default="draft", nullable=False))
    op.create_index(op.f("ix_generations_run_id"), "generations", ["run_id"])
    op.add_column("solutions", sa.Column("normalized_sha256", sa.String(), nullable=True))
    op.create_index(op.f("ix_solutions_normalized_sha256"), "solutions", ["normalized_sha256"])


def _add_run_id() -> None:
    """generations.run_id and its foreign key. SQLite cannot add a constraint to a table, but accepts one inline in
    ADD COLUMN (the default being NULL); a batch rebuild instead would drop and re-create generations, which other
    tables reference, under enforced foreign keys."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"ALTER TABLE generations ADD COLUMN run_id INTEGER CONSTRAINT {RUN_FK} REFERENCES runs (id)")
    else:
        op.add_column("generations", sa.Column("run_id", sa.Integer(), nullable=True))
        op.create_foreign_key(RUN_FK, "generations", "runs", ["run_id"], ["id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_solutions_normalized_sha256"), table_name="solutions")
    op.drop_column("solutions", "normalized_sha256")
    op.drop_index(op.f("ix_generations_run_id"), table_name="generations")
    with op.batch_alter_table("generations") as batch:  # SQLite drops a column with a foreign key by a rebuild;
        batch.drop_column("run_id")  # the key goes with its column (PostgreSQL drops it too)
    for column in ("prompt_kind", "island", "sample"):
        op.drop_column("generations", column)
    op.drop_table("archive_cells")
    op.drop_table("runs")
