"""jobs and job_clients: the durable queue of a shared judging service

A job holds a candidate's code and the problem file it is judged against from the moment a server accepts it until
its one verdict is stored (evaluation_id); job_clients holds who asked for it. Nothing stored before changes.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-16
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("board", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        *(sa.Column(name, type_, nullable=False) for name, type_ in (
            ("problem_name", sa.String()), ("problem_path", sa.Text()), ("problem_sha256", sa.String()),
            ("candidate_sha256", sa.String()), ("source", sa.Text()))),
        sa.Column("evaluation_id", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("queued_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["evaluation_id"], ["evaluations.id"], name=op.f("fk_jobs_evaluation_id_evaluations"),
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("key", name=op.f("uq_jobs_key")),
    )
    op.create_index("ix_jobs_queue", "jobs", ["state", "board", "queued_at"])
    op.create_table(
        "job_clients",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("client", sa.String(), nullable=False),
        sa.Column("cancelled", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_clients_job_id_jobs")),
        sa.PrimaryKeyConstraint("job_id", "client", name=op.f("pk_job_clients")),
    )
    op.create_index(op.f("ix_job_clients_client"), "job_clients", ["client"])


def downgrade() -> None:
    op.drop_table("job_clients")
    op.drop_table("jobs")
