"""SQLAlchemy 2 models of the tuning database.

Every table name starts with ``wm_`` so that Optuna's tables (``studies``, ``trials``, ...) can live in
the same database. JSON columns are :class:`~db.columns.VersionedJSON`: each document carries its
schema version. Times are aware UTC datetimes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from db.columns import UTCDateTime, VersionedJSON

#: Constraint names are fixed so migrations (and SQLite batch mode) can refer to them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: The statuses the storage accepts, spelled here once. ``search.trial.TrialStatus`` and the CHECK
#: constraints that the migrations create must agree (tests/db/test_statuses.py): changing a list needs
#: a migration of its constraint, and the enum follows the trial list.
JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
ACTIVE_JOB_STATUSES = ("queued", "running")
TRIAL_STATUSES = ("ok", "compile_error", "launch_error", "wrong_result", "timeout", "invalid")


def utcnow() -> datetime:
    return datetime.now(UTC)


def _one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


#: The predicate of the partial unique index on active jobs. An upsert that means to use that index as
#: its conflict arbiter must name the same predicate, so both take it from here.
ACTIVE_JOB_PREDICATE = _one_of("status", ACTIVE_JOB_STATUSES)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Device(Base):
    __tablename__ = "wm_devices"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    #: Compute capability (``sm_90``) for GPUs, ISA (``x86_64-avx2``) for host targets.
    arch: Mapped[str] = mapped_column(String(64), index=True)
    driver: Mapped[str] = mapped_column(String(64))
    #: Streaming multiprocessors for GPUs, cores for host targets.
    compute_units: Mapped[int] = mapped_column(Integer)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    l2_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Toolchain(Base):
    __tablename__ = "wm_toolchains"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    warpmap_version: Mapped[str] = mapped_column(String(64))
    nvrtc_version: Mapped[str] = mapped_column(String(64))
    host_compiler: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Workload(Base):
    __tablename__ = "wm_workloads"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    op: Mapped[str] = mapped_column(String(64), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(VersionedJSON(version=1))
    spec_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Job(Base):
    __tablename__ = "wm_jobs"
    __table_args__ = (
        CheckConstraint(_one_of("status", JOB_STATUSES), name="status"),
        CheckConstraint("attempts >= 0", name="attempts"),
        # One active job per cache key: a duplicate request joins the running one.
        Index(
            "uq_wm_jobs_active_key",
            "workload_id",
            "device_id",
            "toolchain_id",
            unique=True,
            sqlite_where=text(ACTIVE_JOB_PREDICATE),
            postgresql_where=text(ACTIVE_JOB_PREDICATE),
        ),
        Index("ix_wm_jobs_status_created", "status", "created_at"),
        Index("ix_wm_jobs_queue_status", "queue", "status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("wm_workloads.id", ondelete="CASCADE"))
    device_id: Mapped[int] = mapped_column(ForeignKey("wm_devices.id", ondelete="CASCADE"))
    toolchain_id: Mapped[int] = mapped_column(ForeignKey("wm_toolchains.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16), default="queued")
    strategy: Mapped[str] = mapped_column(String(64))
    budget: Mapped[dict[str, Any]] = mapped_column(VersionedJSON(version=1))
    progress: Mapped[dict[str, Any]] = mapped_column(VersionedJSON(version=1))
    #: The target as requested (``cpu``, ``cuda``, ``cuda:1``) and the queue of the device kind it runs on.
    target: Mapped[str] = mapped_column(String(32), default="cpu", server_default="cpu")
    queue: Mapped[str] = mapped_column(String(200), default="", server_default="")
    #: How the tuning runs: ``{"level": 2, "seed": 0, "timeout_s": 120.0}``.
    options: Mapped[dict[str, Any] | None] = mapped_column(VersionedJSON(version=1), nullable=True)
    #: The worker running the job now (None while it waits).
    worker: Mapped[str | None] = mapped_column(String(200))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Trial(Base):
    __tablename__ = "wm_trials"
    __table_args__ = (
        CheckConstraint(_one_of("status", TRIAL_STATUSES), name="status"),
        Index("ix_wm_trials_job_number", "job_id", "number"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("wm_jobs.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    params: Mapped[dict[str, Any]] = mapped_column(VersionedJSON(version=1))
    status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text, default="")
    latency_median_us: Mapped[float | None] = mapped_column(Float)
    latency_p20_us: Mapped[float | None] = mapped_column(Float)
    latency_p80_us: Mapped[float | None] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer, default=0)
    registers: Mapped[int | None] = mapped_column(Integer)
    shared_bytes: Mapped[int | None] = mapped_column(Integer)
    compile_ms: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Kernel(Base):
    """The best kernel known for one (workload, device, toolchain)."""

    __tablename__ = "wm_kernels"
    __table_args__ = (
        UniqueConstraint("workload_id", "device_id", "toolchain_id", name="uq_wm_kernels_cache_key"),
        CheckConstraint("latency_us > 0", name="latency_positive"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("wm_workloads.id", ondelete="CASCADE"))
    device_id: Mapped[int] = mapped_column(ForeignKey("wm_devices.id", ondelete="CASCADE"), index=True)
    toolchain_id: Mapped[int] = mapped_column(ForeignKey("wm_toolchains.id", ondelete="CASCADE"))
    schedule: Mapped[dict[str, Any]] = mapped_column(VersionedJSON(version=1))
    source: Mapped[str] = mapped_column(Text)
    binary: Mapped[bytes | None] = mapped_column(LargeBinary)
    entry: Mapped[str] = mapped_column(String(200))
    grid: Mapped[list[int]] = mapped_column(VersionedJSON(version=1))
    block: Mapped[list[int]] = mapped_column(VersionedJSON(version=1))
    shared_bytes: Mapped[int] = mapped_column(Integer)
    #: Parameters in argument order: ``[{"name": ..., "dtype": ..., "pointer": ...}, ...]``.
    params: Mapped[list[dict[str, Any]]] = mapped_column(VersionedJSON(version=1))
    #: A program of several launches, whole (``db.records.KernelResult.program``); None for one launch.
    program: Mapped[dict[str, Any] | None] = mapped_column(VersionedJSON(version=1), nullable=True)
    latency_us: Mapped[float] = mapped_column(Float)
    #: The measurement's 20th and 80th percentiles (``latency_us`` is its median); null before 0009.
    latency_p20_us: Mapped[float | None] = mapped_column(Float)
    latency_p80_us: Mapped[float | None] = mapped_column(Float)
    gflops: Mapped[float | None] = mapped_column(Float)
    gbs: Mapped[float | None] = mapped_column(Float)
    #: The roofs of the tuning that measured it (FP32 GFLOP/s, GB/s over the footprint); null before 0010.
    peak_gflops: Mapped[float | None] = mapped_column(Float)
    bandwidth_gbs: Mapped[float | None] = mapped_column(Float)
    trials_used: Mapped[int] = mapped_column(Integer)
    #: Bytes of source + binary + JSON documents, kept so size accounting is one SUM on any database.
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    last_hit_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    hits: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class Worker(Base):
    """A process that runs jobs of one queue (one device); alive while its ``last_seen_at`` is recent."""

    __tablename__ = "wm_workers"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    target: Mapped[str] = mapped_column(String(32))
    queue: Mapped[str] = mapped_column(String(200), index=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("wm_devices.id", ondelete="CASCADE"))
    toolchain_id: Mapped[int] = mapped_column(ForeignKey("wm_toolchains.id", ondelete="CASCADE"))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("wm_jobs.id", ondelete="SET NULL"))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class ApiKey(Base):
    __tablename__ = "wm_api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    #: The first characters of the token, shown in listings so a key can be recognised.
    prefix: Mapped[str] = mapped_column(String(16))
    #: SHA-256 (hex) of the full token; the token itself is never stored.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[str]] = mapped_column(VersionedJSON(version=1))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    #: Budget limits of this key's tuning requests; None: the service's (``api_max_trials``, ``api_max_seconds``).
    max_trials: Mapped[int | None] = mapped_column(Integer)
    max_seconds: Mapped[float | None] = mapped_column(Float)
