"""Kernel hit tracking: when a cached kernel was last served and how often, for eviction by use.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Batch mode: SQLite cannot alter most of a table in place; Alembic copies it instead.
    with op.batch_alter_table("wm_kernels") as batch:
        batch.add_column(sa.Column("last_hit_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("hits", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("wm_kernels") as batch:
        batch.drop_column("hits")
        batch.drop_column("last_hit_at")
