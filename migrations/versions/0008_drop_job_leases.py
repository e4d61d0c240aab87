"""Drop the job lease columns: which worker runs a job is the job engine's business (procrastinate's
heartbeats and stalled-job retry in cluster mode, the executor's restart when embedded), not a lease.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("wm_jobs") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("lease_owner")


def downgrade() -> None:
    # The types 0001 made them with.
    with op.batch_alter_table("wm_jobs") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(200), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(), nullable=True))
