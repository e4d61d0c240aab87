"""Kernels of several launches: the whole program (launches in order, their bindings, workspaces).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("wm_kernels") as batch:
        batch.add_column(sa.Column("program", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("wm_kernels") as batch:
        batch.drop_column("program")
