"""Initial schema: devices, toolchains, workloads, jobs, trials, kernels, API keys.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JOB_STATUSES = "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')"
ACTIVE = "status IN ('queued', 'running')"
TRIAL_STATUSES = "status IN ('ok', 'compile_error', 'launch_error', 'wrong_result', 'timeout', 'invalid')"


def _when() -> sa.DateTime:
    return sa.DateTime()


def _key_columns() -> list[sa.Column]:
    """The cache key columns shared by jobs and kernels (fresh objects: a column joins one table)."""
    tables = (("workload", "wm_workloads"), ("device", "wm_devices"), ("toolchain", "wm_toolchains"))
    return [
        sa.Column(
            f"{name}_id", sa.Integer(), sa.ForeignKey(f"{table}.id", ondelete="CASCADE"), nullable=False
        )
        for name, table in tables
    ]


def upgrade() -> None:
    op.create_table(
        "wm_devices",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("arch", sa.String(64), nullable=False),
        sa.Column("driver", sa.String(64), nullable=False),
        sa.Column("compute_units", sa.Integer(), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("l2_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", _when(), nullable=False),
        sa.UniqueConstraint("key", name="uq_wm_devices_key"),
    )
    op.create_index("ix_wm_devices_arch", "wm_devices", ["arch"])
    op.create_table(
        "wm_toolchains",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("warpmap_version", sa.String(64), nullable=False),
        sa.Column("nvrtc_version", sa.String(64), nullable=False),
        sa.Column("host_compiler", sa.String(128), nullable=False),
        sa.Column("created_at", _when(), nullable=False),
        sa.UniqueConstraint("key", name="uq_wm_toolchains_key"),
    )
    op.create_table(
        "wm_workloads",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("op", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("created_at", _when(), nullable=False),
        sa.UniqueConstraint("key", name="uq_wm_workloads_key"),
    )
    op.create_index("ix_wm_workloads_op", "wm_workloads", ["op"])
    op.create_table(
        "wm_jobs",
        sa.Column("id", sa.Integer(), primary_key=True),
        *_key_columns(),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("strategy", sa.String(64), nullable=False),
        sa.Column("budget", sa.JSON(), nullable=False),
        sa.Column("progress", sa.JSON(), nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_expires_at", _when(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", _when(), nullable=False),
        sa.Column("started_at", _when(), nullable=True),
        sa.Column("finished_at", _when(), nullable=True),
        sa.Column("updated_at", _when(), nullable=False),
        sa.CheckConstraint(JOB_STATUSES, name="ck_wm_jobs_status"),
        sa.CheckConstraint("attempts >= 0", name="ck_wm_jobs_attempts"),
    )
    op.create_index(
        "uq_wm_jobs_active_key",
        "wm_jobs",
        ["workload_id", "device_id", "toolchain_id"],
        unique=True,
        sqlite_where=sa.text(ACTIVE),
        postgresql_where=sa.text(ACTIVE),
    )
    op.create_index("ix_wm_jobs_status_created", "wm_jobs", ["status", "created_at"])
    op.create_table(
        "wm_trials",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("wm_jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("latency_median_us", sa.Float(), nullable=True),
        sa.Column("latency_p20_us", sa.Float(), nullable=True),
        sa.Column("latency_p80_us", sa.Float(), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("registers", sa.Integer(), nullable=True),
        sa.Column("shared_bytes", sa.Integer(), nullable=True),
        sa.Column("compile_ms", sa.Float(), nullable=True),
        sa.Column("created_at", _when(), nullable=False),
        sa.CheckConstraint(TRIAL_STATUSES, name="ck_wm_trials_status"),
    )
    op.create_index("ix_wm_trials_job_number", "wm_trials", ["job_id", "number"])
    op.create_table(
        "wm_kernels",
        sa.Column("id", sa.Integer(), primary_key=True),
        *_key_columns(),
        sa.Column("schedule", sa.JSON(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("binary", sa.LargeBinary(), nullable=True),
        sa.Column("entry", sa.String(200), nullable=False),
        sa.Column("grid", sa.JSON(), nullable=False),
        sa.Column("block", sa.JSON(), nullable=False),
        sa.Column("shared_bytes", sa.Integer(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("latency_us", sa.Float(), nullable=False),
        sa.Column("gflops", sa.Float(), nullable=True),
        sa.Column("trials_used", sa.Integer(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", _when(), nullable=False),
        sa.Column("updated_at", _when(), nullable=False),
        sa.UniqueConstraint("workload_id", "device_id", "toolchain_id", name="uq_wm_kernels_cache_key"),
        sa.CheckConstraint("latency_us > 0", name="ck_wm_kernels_latency_positive"),
    )
    op.create_index("ix_wm_kernels_device_id", "wm_kernels", ["device_id"])
    op.create_index("ix_wm_kernels_updated_at", "wm_kernels", ["updated_at"])
    op.create_table(
        "wm_api_keys",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("created_at", _when(), nullable=False),
        sa.Column("last_used_at", _when(), nullable=True),
        sa.Column("revoked_at", _when(), nullable=True),
        sa.UniqueConstraint("token_hash", name="uq_wm_api_keys_token_hash"),
    )


def downgrade() -> None:
    for table in (
        "wm_api_keys",
        "wm_kernels",
        "wm_trials",
        "wm_jobs",
        "wm_workloads",
        "wm_toolchains",
        "wm_devices",
    ):
        op.drop_table(table)
