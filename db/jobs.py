"""Keyword-only repository functions for tuning jobs: one active job per cache key.

The job records are what the API reports; which process runs a job is the job engine's business (the
in-process executor, or a PostgreSQL job queue). A worker moves a job through :func:`start_job`,
:func:`record_progress` (which hands back the job, so a cancellation is seen after the trial in
progress) and :func:`end_job`, or gives it back with :func:`release_job`.

There are no leases: procrastinate's worker heartbeats and stalled-job retry (cluster), or the
executor's own restart (embedded), decide when a job whose worker died runs again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVarTuple

from sqlalchemy import Select, and_, delete, func, select, text, update
from sqlalchemy.orm import Session

from db.errors import ConflictError, NotFoundError
from db.models import (
    ACTIVE_JOB_PREDICATE,
    ACTIVE_JOB_STATUSES,
    JOB_STATUSES,
    Device,
    Job,
    Kernel,
    Toolchain,
    Workload,
    utcnow,
)
from db.records import CacheHit, DeviceInfo, JobRecord, ToolchainInfo, WorkloadSpec
from db.repository import (
    device_info,
    ensure_device,
    ensure_toolchain,
    ensure_workload,
    lookup_kernel,
    toolchain_info,
    upsert_statement,
)

_ACTIVE_PREDICATE = text(ACTIVE_JOB_PREDICATE)


def _job_query() -> Select[Job, Workload, Device, Toolchain]:
    return (
        select(Job, Workload, Device, Toolchain)
        .join(Workload, Job.workload_id == Workload.id)
        .join(Device, Job.device_id == Device.id)
        .join(Toolchain, Job.toolchain_id == Toolchain.id)
    )


def _to_record(row: Any) -> JobRecord:
    job, workload, device, toolchain = row
    return JobRecord(
        id=job.id,
        workload=WorkloadSpec(op=workload.op, spec=workload.spec),
        device=device_info(device),
        toolchain=toolchain_info(toolchain),
        status=job.status,
        strategy=job.strategy,
        budget=job.budget,
        progress=job.progress,
        target=job.target,
        queue=job.queue,
        options=job.options or {},
        worker=job.worker,
        attempts=job.attempts,
        error=job.error,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        updated_at=job.updated_at,
    )


def get_job(*, session: Session, job_id: int) -> JobRecord:
    row = session.execute(
        _job_query().where(Job.id == job_id).execution_options(populate_existing=True)
    ).first()
    if row is None:
        raise NotFoundError(f"no tuning job with id {job_id}")
    return _to_record(row)


def submit_job(
    *,
    session: Session,
    workload: WorkloadSpec,
    device: DeviceInfo,
    toolchain: ToolchainInfo,
    strategy: str,
    budget: Mapping[str, Any],
    target: str = "cpu",
    queue: str = "",
    options: Mapping[str, Any] | None = None,
) -> tuple[JobRecord, bool]:
    """Queue a job for the key, or join the active one; returns ``(job, created)``.

    ``target`` is the target as requested, ``queue`` the device kind the job must run on, ``options``
    how it is tuned (level, seed, time-out); a joined job keeps its own.
    """
    now = utcnow()
    keys = {
        "workload_id": ensure_workload(session=session, workload=workload),
        "device_id": ensure_device(session=session, device=device),
        "toolchain_id": ensure_toolchain(session=session, toolchain=toolchain),
    }
    stmt = upsert_statement(session, Job).values(
        **keys,
        status="queued",
        strategy=strategy,
        budget=dict(budget),
        progress={},
        target=target,
        queue=queue,
        options=dict(options or {}),
        attempts=0,
        created_at=now,
        updated_at=now,
    )
    inserted = session.execute(
        stmt.on_conflict_do_nothing(index_elements=list(keys), index_where=_ACTIVE_PREDICATE).returning(
            Job.id
        )
    ).first()
    active = session.execute(
        select(Job.id).where(
            *(getattr(Job, k) == v for k, v in keys.items()), Job.status.in_(ACTIVE_JOB_STATUSES)
        )
    ).scalar_one()
    return get_job(session=session, job_id=active), inserted is not None


def submit_unless_tuned(
    *,
    session: Session,
    workload: WorkloadSpec,
    device: DeviceInfo,
    toolchain: ToolchainInfo,
    **job: Any,
) -> CacheHit | tuple[JobRecord, bool]:
    """:func:`submit_job`, unless the key's kernel is in the cache by the time a new job would be made.

    A request that missed the cache a moment before a worker saved the key's kernel and ended its job
    would otherwise queue the same tuning again. The job is inserted first and the cache read after:
    a worker saves its kernel before it ends its job, so when no active job blocked the insert, any
    kernel of a job that just ended was committed before the read, which sees it. The inserted job is
    then deleted (nothing has seen it: the caller dispatches only what this returns).
    """
    submitted, created = submit_job(session=session, workload=workload, device=device, toolchain=toolchain, **job)
    if not created:
        return submitted, created
    hit = lookup_kernel(session=session, workload=workload, device=device, toolchain=toolchain, record_hit=False)
    if hit is None:
        return submitted, created
    session.execute(delete(Job).where(Job.id == submitted.id))
    return hit


#: The columns of the query a filter narrows: the whole job row, or a count of them.
_Columns = TypeVarTuple("_Columns")


def _job_filter(query: Select[*_Columns], status: str | None, op: str | None) -> Select[*_Columns]:
    if status is not None:
        if status not in JOB_STATUSES:
            raise ValueError(f"unknown job status {status!r}; expected one of {JOB_STATUSES}")
        query = query.where(Job.status == status)
    if op is not None:
        query = query.where(Workload.op == op)
    return query


def list_jobs(*, session: Session, status: str | None = None, op: str | None = None, limit: int = 100,
              offset: int = 0) -> list[JobRecord]:
    """Jobs, newest first; only those with ``status``, or of the operator ``op``, when given;
    ``limit``/``offset`` page through them."""
    query = _job_filter(_job_query(), status, op).order_by(Job.created_at.desc(), Job.id.desc())
    return [_to_record(row) for row in session.execute(query.limit(limit).offset(offset))]


def count_jobs(*, session: Session, status: str | None = None, op: str | None = None) -> int:
    """How many jobs :func:`list_jobs` would list with these filters and no limit."""
    query = select(func.count(Job.id)).select_from(Job).join(Workload, Job.workload_id == Workload.id)
    return session.execute(_job_filter(query, status, op)).scalar_one()


def job_kernel_ids(*, session: Session, job_ids: Sequence[int]) -> dict[int, int]:
    """The id of the cached kernel of each job's key, for the jobs whose key has one (whichever job filed
    it): one query that reads no kernel's source or binary."""
    if not job_ids:
        return {}
    query = (
        select(Job.id, Kernel.id)
        .join(Kernel, and_(Kernel.workload_id == Job.workload_id, Kernel.device_id == Job.device_id,
                           Kernel.toolchain_id == Job.toolchain_id))
        .where(Job.id.in_(list(job_ids)))
    )
    return dict(session.execute(query).all())


def cancel_job(*, session: Session, job_id: int, now: datetime | None = None) -> JobRecord:
    """Cancel an active job; a job that already ended raises :class:`ConflictError`."""
    now = now or utcnow()
    done = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.in_(ACTIVE_JOB_STATUSES))
        .values(status="cancelled", finished_at=now, updated_at=now, worker=None)
        .returning(Job.id)
    ).first()
    job = get_job(session=session, job_id=job_id)
    if done is None:
        raise ConflictError(f"job {job_id} already ended as {job.status}; nothing to cancel")
    return job


def start_job(*, session: Session, job_id: int, worker: str, now: datetime | None = None) -> JobRecord | None:
    """Mark the job running on ``worker`` (attempts + 1); None when it was cancelled or already ended.

    A job found running is taken over: the engine hands a job to a second worker only when the first
    is gone (its queue's stalled-job retry, or a restart of the embedded service).
    """
    now = now or utcnow()
    started = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.in_(ACTIVE_JOB_STATUSES))
        .values(status="running", worker=worker, attempts=Job.attempts + 1, started_at=now, updated_at=now)
        .returning(Job.id)
    ).first()
    if started is None:
        get_job(session=session, job_id=job_id)  # NotFoundError for an unknown id
        return None
    return get_job(session=session, job_id=job_id)


def record_progress(
    *, session: Session, job_id: int, progress: Mapping[str, Any], now: datetime | None = None
) -> JobRecord:
    """Store a running job's progress document; returns the job, whose status may say ``cancelled``."""
    now = now or utcnow()
    session.execute(
        update(Job).where(Job.id == job_id, Job.status == "running").values(progress=dict(progress), updated_at=now)
    )
    return get_job(session=session, job_id=job_id)


def end_job(
    *, session: Session, job_id: int, status: str, error: str | None = None, now: datetime | None = None
) -> JobRecord:
    """End a running job as ``succeeded`` or ``failed``; a job cancelled meanwhile stays cancelled."""
    if status not in ("succeeded", "failed"):
        raise ValueError(f"a job ends as 'succeeded' or 'failed', not {status!r}")
    now = now or utcnow()
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == "running")
        .values(status=status, error=error, finished_at=now, updated_at=now, worker=None)
    )
    return get_job(session=session, job_id=job_id)


def release_job(*, session: Session, job_id: int, now: datetime | None = None) -> JobRecord:
    """Give a running job back to its queue (its worker is stopping); its study keeps what was measured."""
    now = now or utcnow()
    session.execute(
        update(Job).where(Job.id == job_id, Job.status == "running").values(status="queued", worker=None,
                                                                             updated_at=now)
    )
    return get_job(session=session, job_id=job_id)
