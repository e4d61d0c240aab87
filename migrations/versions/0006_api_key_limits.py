"""Per-key budget limits: the most trials and seconds a key's tuning requests may ask for (null: the service's).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("wm_api_keys") as batch:
        batch.add_column(sa.Column("max_trials", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("max_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("wm_api_keys") as batch:
        batch.drop_column("max_seconds")
        batch.drop_column("max_trials")
