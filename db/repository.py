"""Keyword-only repository functions for the cache: keys, best kernels and trials.

Every function takes the open session as ``session=`` and leaves committing to
:func:`db.session.session_scope`. Writes that may race (key rows, best kernels) are single
``INSERT ... ON CONFLICT`` statements, so they stay correct under any number of concurrent writers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, case, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from db.columns import UTCDateTime
from db.errors import DatabaseError, NotFoundError
from db.models import Device, Job, Kernel, Toolchain, Trial, Workload, utcnow
from db.records import (
    CachedKernel,
    CacheHit,
    DeviceInfo,
    KernelResult,
    ToolchainInfo,
    TrialRecord,
    TrialResult,
    WorkloadSpec,
)


def upsert_statement(session: Session, table: Any) -> Any:
    """The dialect's ``INSERT`` construct that supports ``ON CONFLICT``."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise DatabaseError(f"unsupported database dialect {dialect!r}: use SQLite or PostgreSQL")


def _ensure(session: Session, model: Any, key: str, values: dict[str, Any]) -> int:
    """The id of the row with ``key``, inserting it first if needed (race-free)."""
    stmt = upsert_statement(session, model).values(key=key, created_at=utcnow(), **values)
    session.execute(stmt.on_conflict_do_nothing(index_elements=[model.key]))
    return session.execute(select(model.id).where(model.key == key)).scalar_one()


def ensure_workload(*, session: Session, workload: WorkloadSpec) -> int:
    return _ensure(
        session,
        Workload,
        workload.key,
        {"op": workload.op, "spec": dict(workload.spec), "spec_hash": workload.spec_hash},
    )


#: Device details a worker may not know (it stores 0); a later report that knows them fills them in.
_DEVICE_DETAILS = ("compute_units", "memory_bytes", "l2_bytes")


def ensure_device(*, session: Session, device: DeviceInfo) -> int:
    """The id of the device's row, inserting it first if needed. Details stored as 0 (unknown) are
    filled in by the first report that knows them; known details are never overwritten."""
    values: dict[str, Any] = {
        "name": device.name,
        "arch": device.arch,
        "driver": device.driver,
        "compute_units": device.compute_units,
        "memory_bytes": device.memory_bytes,
        "l2_bytes": device.l2_bytes,
    }
    stmt = upsert_statement(session, Device).values(key=device.key, created_at=utcnow(), **values)
    new = stmt.excluded
    stmt = stmt.on_conflict_do_update(
        index_elements=[Device.key],
        set_={name: case((getattr(Device, name) == 0, getattr(new, name)), else_=getattr(Device, name))
              for name in _DEVICE_DETAILS},
        where=or_(*((getattr(Device, name) == 0) & (getattr(new, name) != 0) for name in _DEVICE_DETAILS)),
    )
    session.execute(stmt)
    return session.execute(select(Device.id).where(Device.key == device.key)).scalar_one()


def ensure_toolchain(*, session: Session, toolchain: ToolchainInfo) -> int:
    values = {
        "warpmap_version": toolchain.warpmap,
        "nvrtc_version": toolchain.nvrtc,
        "host_compiler": toolchain.host_compiler,
    }
    return _ensure(session, Toolchain, toolchain.key, values)


def save_kernel(
    *,
    session: Session,
    workload: WorkloadSpec,
    device: DeviceInfo,
    toolchain: ToolchainInfo,
    result: KernelResult,
    now: datetime | None = None,
) -> bool:
    """Offer ``result`` as the best kernel for its key; True if it is now the stored one.

    One statement decides: ``INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE excluded.latency_us <
    wm_kernels.latency_us``. The database evaluates the condition on the row as it is when the write
    lands, so of any number of concurrent writers the fastest always ends up stored, and a slower
    (or equally fast) result never replaces a faster one.
    """
    stamp = now or utcnow()
    values = {
        "workload_id": ensure_workload(session=session, workload=workload),
        "device_id": ensure_device(session=session, device=device),
        "toolchain_id": ensure_toolchain(session=session, toolchain=toolchain),
        **result.fields(),
        "binary": result.binary,
        "size_bytes": result.size_bytes,
        "created_at": stamp,
        "updated_at": stamp,
        "hits": 0,
    }
    stmt = upsert_statement(session, Kernel).values(**values)
    replaced = {name: stmt.excluded[name] for name in values if name not in ("created_at", "hits")}
    stmt = stmt.on_conflict_do_update(
        index_elements=[Kernel.workload_id, Kernel.device_id, Kernel.toolchain_id],
        set_=replaced,
        where=stmt.excluded.latency_us < Kernel.latency_us,
    ).returning(Kernel.id)
    return session.execute(stmt).first() is not None


def kernel_query() -> Select[Kernel, Workload, Device, Toolchain]:
    return (
        select(Kernel, Workload, Device, Toolchain)
        .join(Workload, Kernel.workload_id == Workload.id)
        .join(Device, Kernel.device_id == Device.id)
        .join(Toolchain, Kernel.toolchain_id == Toolchain.id)
    )


def device_info(row: Device) -> DeviceInfo:
    return DeviceInfo(
        name=row.name,
        arch=row.arch,
        driver=row.driver,
        compute_units=row.compute_units,
        memory_bytes=row.memory_bytes,
        l2_bytes=row.l2_bytes,
    )


def toolchain_info(row: Toolchain) -> ToolchainInfo:
    return ToolchainInfo(
        warpmap=row.warpmap_version, nvrtc=row.nvrtc_version, host_compiler=row.host_compiler
    )


def to_cached_kernel(row: Any) -> CachedKernel:
    kernel, workload, device, toolchain = row
    result = KernelResult(
        schedule=kernel.schedule,
        source=kernel.source,
        entry=kernel.entry,
        grid=tuple(kernel.grid),
        block=tuple(kernel.block),
        shared_bytes=kernel.shared_bytes,
        params=tuple(kernel.params),
        latency_us=kernel.latency_us,
        trials_used=kernel.trials_used,
        binary=kernel.binary,
        gflops=kernel.gflops,
        latency_p20_us=kernel.latency_p20_us,
        latency_p80_us=kernel.latency_p80_us,
        gbs=kernel.gbs,
        peak_gflops=kernel.peak_gflops,
        bandwidth_gbs=kernel.bandwidth_gbs,
        program=kernel.program,
    )
    return CachedKernel(
        id=kernel.id,
        workload=WorkloadSpec(op=workload.op, spec=workload.spec),
        device=device_info(device),
        toolchain=toolchain_info(toolchain),
        result=result,
        size_bytes=kernel.size_bytes,
        created_at=kernel.created_at,
        updated_at=kernel.updated_at,
        last_hit_at=kernel.last_hit_at,
        hits=kernel.hits,
    )


def lookup_kernel(
    *,
    session: Session,
    workload: WorkloadSpec,
    device: DeviceInfo,
    toolchain: ToolchainInfo,
    nearest: bool = False,
    record_hit: bool = True,
) -> CacheHit | None:
    """The best kernel for the exact key, or None.

    With ``nearest=True`` and no exact entry, the answer may come from another device of the same
    ``arch`` or another toolchain (same device name first, then same toolchain, then the most recent),
    and is returned with ``exact=False``.
    """
    exact_query = kernel_query().where(
        Workload.key == workload.key, Device.key == device.key, Toolchain.key == toolchain.key
    )
    row = session.execute(exact_query).first()
    exact = row is not None
    if row is None and nearest:
        near_query = (
            kernel_query()
            .where(Workload.key == workload.key, Device.arch == device.arch)
            .order_by(
                case((Device.name == device.name, 0), else_=1),
                case((Toolchain.key == toolchain.key, 0), else_=1),
                Kernel.updated_at.desc(),
                Kernel.id,
            )
            .limit(1)
        )
        row = session.execute(near_query).first()
    if row is None:
        return None
    if record_hit:
        kernel_id = row[0].id
        session.execute(
            update(Kernel).where(Kernel.id == kernel_id).values(hits=Kernel.hits + 1, last_hit_at=utcnow())
        )
    return CacheHit(kernel=to_cached_kernel(row), exact=exact)


def add_kernel_hits(*, session: Session, hits: Mapping[int, int], at: datetime | None = None) -> None:
    """Add counted cache hits to kernels (by id) in one batched statement, their ``last_hit_at`` set to ``at``.

    A server serves hits with ``lookup_kernel(..., record_hit=False)`` and counts them in memory, so
    the read path writes nothing; this applies the counts a few at a time. A kernel evicted meanwhile
    matches no row and its count is dropped.
    """
    if not hits:
        return
    stamp = at or utcnow()
    statement = (
        update(Kernel)
        .where(Kernel.id == bindparam("kernel_id"))
        .values(hits=Kernel.hits + bindparam("served"), last_hit_at=bindparam("stamp", type_=UTCDateTime()))
    )
    rows = [{"kernel_id": k, "served": n, "stamp": stamp} for k, n in sorted(hits.items()) if n > 0]
    if rows:
        session.connection().execute(statement, rows)


def count_jobs_by_status(*, session: Session) -> dict[str, int]:
    """How many jobs have each status (statuses with none are left out)."""
    query = select(Job.status, func.count(Job.id)).group_by(Job.status)
    return {str(status): int(n) for status, n in session.execute(query)}


def count_trials_by_status(*, session: Session) -> dict[str, int]:
    """How many trials, of all jobs, ended with each status (a counter: it only grows while trials are kept)."""
    query = select(Trial.status, func.count(Trial.id)).group_by(Trial.status)
    return {str(status): int(n) for status, n in session.execute(query)}


def get_kernel(*, session: Session, kernel_id: int) -> CachedKernel:
    row = session.execute(kernel_query().where(Kernel.id == kernel_id)).first()
    if row is None:
        raise NotFoundError(f"no cached kernel with id {kernel_id}")
    return to_cached_kernel(row)


def record_trial(*, session: Session, job_id: int, trial: TrialResult) -> int:
    row = Trial(
        job_id=job_id,
        number=trial.number,
        params=dict(trial.params),
        status=trial.status,
        message=trial.message,
        latency_median_us=trial.latency_median_us,
        latency_p20_us=trial.latency_p20_us,
        latency_p80_us=trial.latency_p80_us,
        samples=trial.samples,
        registers=trial.registers,
        shared_bytes=trial.shared_bytes,
        compile_ms=trial.compile_ms,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return row.id


def list_trials(*, session: Session, job_id: int, limit: int | None = None, offset: int = 0) -> list[TrialRecord]:
    """The job's trials by number; ``limit``/``offset`` page through them."""
    rows = session.execute(
        select(Trial).where(Trial.job_id == job_id).order_by(Trial.number, Trial.id).limit(limit).offset(offset)
    ).scalars()
    return [
        TrialRecord(
            id=row.id,
            job_id=row.job_id,
            created_at=row.created_at,
            result=TrialResult(
                number=row.number,
                params=row.params,
                status=row.status,
                message=row.message,
                latency_median_us=row.latency_median_us,
                latency_p20_us=row.latency_p20_us,
                latency_p80_us=row.latency_p80_us,
                samples=row.samples,
                registers=row.registers,
                shared_bytes=row.shared_bytes,
                compile_ms=row.compile_ms,
            ),
        )
        for row in rows
    ]


def count_trials(*, session: Session, job_id: int | None = None) -> int:
    query = select(func.count(Trial.id))
    if job_id is not None:
        query = query.where(Trial.job_id == job_id)
    return session.execute(query).scalar_one()
