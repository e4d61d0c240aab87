"""The best kernel's measured spread and bandwidth: 20th and 80th latency percentiles (the stored latency
is their median), GB/s.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("wm_kernels") as batch:
        batch.add_column(sa.Column("latency_p20_us", sa.Float(), nullable=True))
        batch.add_column(sa.Column("latency_p80_us", sa.Float(), nullable=True))
        batch.add_column(sa.Column("gbs", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("wm_kernels") as batch:
        batch.drop_column("gbs")
        batch.drop_column("latency_p80_us")
        batch.drop_column("latency_p20_us")
