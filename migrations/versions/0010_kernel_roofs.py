"""The roofs of the tuning that measured the best kernel: the target's FP32 peak (GFLOP/s) and its
bandwidth over the workload's footprint (GB/s), so a cache hit reports the fraction of the roofline
that the tuning reported.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("wm_kernels") as batch:
        batch.add_column(sa.Column("peak_gflops", sa.Float(), nullable=True))
        batch.add_column(sa.Column("bandwidth_gbs", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("wm_kernels") as batch:
        batch.drop_column("bandwidth_gbs")
        batch.drop_column("peak_gflops")
