"""Workers and what a job runs on: the worker registry, and each job's target, queue and options.

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


def upgrade() -> None:
    op.create_table(
        "wm_workers",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("target", sa.String(32), nullable=False),
        sa.Column("queue", sa.String(200), nullable=False),
        sa.Column("device_id", sa.Integer(), sa.ForeignKey("wm_devices.id", ondelete="CASCADE"), nullable=False),
        sa.Column("toolchain_id", sa.Integer(), sa.ForeignKey("wm_toolchains.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("wm_jobs.id", ondelete="SET NULL"), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(), nullable=False),
        sa.Column("stopped_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("name", name="uq_wm_workers_name"),
    )
    op.create_index("ix_wm_workers_queue", "wm_workers", ["queue"])
    with op.batch_alter_table("wm_jobs") as batch:
        # Jobs queued before this revision were all tuned on the host or a GPU the request named; "cpu"
        # and an empty queue mark them as from before the queue existed.
        batch.add_column(sa.Column("target", sa.String(32), nullable=False, server_default="cpu"))
        batch.add_column(sa.Column("queue", sa.String(200), nullable=False, server_default=""))
        batch.add_column(sa.Column("options", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("worker", sa.String(200), nullable=True))
        batch.create_index("ix_wm_jobs_queue_status", ["queue", "status"])


def downgrade() -> None:
    with op.batch_alter_table("wm_jobs") as batch:
        batch.drop_index("ix_wm_jobs_queue_status")
        batch.drop_column("worker")
        batch.drop_column("options")
        batch.drop_column("queue")
        batch.drop_column("target")
    op.drop_index("ix_wm_workers_queue", table_name="wm_workers")
    op.drop_table("wm_workers")
