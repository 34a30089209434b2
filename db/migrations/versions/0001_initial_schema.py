"""initial schema: problems, solutions, evaluations, generations (what create_all made before migrations)

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _created_at() -> sa.Column:
    return sa.Column("created_at", sa.DateTime(), nullable=False)  # UTC, naive: see db.models.UTCDateTime


def _id(table: str) -> list:
    return [sa.Column("id", sa.Integer(), nullable=False), sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{table}"))]


def _fk(table: str, column: str, target: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint([column], [f"{target}.id"], name=op.f(f"fk_{table}_{column}_{target}"))


def upgrade() -> None:
    op.create_table(
        "problems",
        *_id("problems"),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(), nullable=False),
        _created_at(),
        sa.UniqueConstraint("name", name=op.f("uq_problems_name")),
    )
    op.create_table(
        "solutions",
        *_id("solutions"),
        sa.Column("sha256", sa.String(), nullable=False),
        sa.Column("problem_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("seed_id", sa.String(), nullable=True),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        _created_at(),
        _fk("solutions", "parent_id", "solutions"),
        _fk("solutions", "problem_id", "problems"),
        sa.UniqueConstraint("sha256", name=op.f("uq_solutions_sha256")),
    )
    op.create_index(op.f("ix_solutions_problem_id"), "solutions", ["problem_id"])
    op.create_table(
        "evaluations",
        *_id("evaluations"),
        sa.Column("solution_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("cause", sa.Text(), nullable=False),
        sa.Column("evidence", JSON, nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("device_name", sa.String(), nullable=False),
        sa.Column("size", sa.String(), nullable=False),
        sa.Column("candidate_ms", sa.Double(), nullable=True),
        sa.Column("candidate_std_ms", sa.Double(), nullable=True),
        sa.Column("reference_ms", sa.Double(), nullable=True),
        sa.Column("compiled_reference_ms", sa.Double(), nullable=True),
        sa.Column("speedup", sa.Double(), nullable=True),
        sa.Column("speedup_vs_compile", sa.Double(), nullable=True),
        sa.Column("torch_version", sa.String(), nullable=False),
        sa.Column("cuda_version", sa.String(), nullable=True),
        sa.Column("timings", JSON, nullable=False),
        sa.Column("wall_s", sa.Double(), nullable=False),
        _created_at(),
        _fk("evaluations", "solution_id", "solutions"),
    )
    op.create_index("ix_evaluations_board", "evaluations", ["status", "speedup", "solution_id"])
    op.create_index("ix_evaluations_lookup", "evaluations", ["solution_id", "device_name", "size"])
    op.create_table(
        "generations",
        *_id("generations"),
        sa.Column("problem_id", sa.Integer(), nullable=False),
        sa.Column("request_hash", sa.String(), nullable=False),
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("prompt", JSON, nullable=False),
        sa.Column("response", sa.Text(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=True),
        sa.Column("latency_s", sa.Double(), nullable=False),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("parent_generation_id", sa.Integer(), nullable=True),
        sa.Column("solution_id", sa.Integer(), nullable=True),
        sa.Column("extraction_status", sa.String(), nullable=False),
        _created_at(),
        _fk("generations", "parent_generation_id", "generations"),
        _fk("generations", "problem_id", "problems"),
        _fk("generations", "solution_id", "solutions"),
    )
    op.create_index(op.f("ix_generations_problem_id"), "generations", ["problem_id"])
    op.create_index(op.f("ix_generations_request_hash"), "generations", ["request_hash"])


def downgrade() -> None:
    for table in ("generations", "evaluations", "solutions", "problems"):
        op.drop_table(table)  # their indexes go with them
