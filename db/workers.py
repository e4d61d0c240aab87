"""Keyword-only repository functions for the worker registry: who serves which queue, and who is alive.

A worker registers at start (by name, so a restarted worker takes its old row back), touches its row
every few seconds while it runs, and marks it stopped when it exits. The API reads the registry to
answer ``GET /v1/devices``, to resolve a requested target to a device kind, and for readiness. A
worker killed without a word simply stops touching its row: it is dead once ``alive_within_s`` passes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from db.models import Device, Toolchain, Worker, utcnow
from db.records import DeviceInfo, ToolchainInfo, WorkerRecord
from db.repository import device_info, ensure_device, ensure_toolchain, toolchain_info, upsert_statement

#: A worker not seen for this long is reported dead.
ALIVE_WITHIN_S = 30.0


def register_worker(
    *,
    session: Session,
    name: str,
    target: str,
    queue: str,
    device: DeviceInfo,
    toolchain: ToolchainInfo,
    host: str,
    pid: int,
    now: datetime | None = None,
) -> WorkerRecord:
    """Record (or take back, by name) a worker that serves ``queue`` on ``device``."""
    now = now or utcnow()
    values: dict[str, Any] = {
        "target": target,
        "queue": queue,
        "device_id": ensure_device(session=session, device=device),
        "toolchain_id": ensure_toolchain(session=session, toolchain=toolchain),
        "host": host,
        "pid": pid,
        "job_id": None,
        "started_at": now,
        "last_seen_at": now,
        "stopped_at": None,
    }
    stmt = upsert_statement(session, Worker).values(name=name, **values)
    session.execute(stmt.on_conflict_do_update(index_elements=["name"], set_=values))
    return _get(session, name, now)


def touch_worker(*, session: Session, name: str, job_id: int | None, now: datetime | None = None) -> None:
    """The worker's heartbeat: seen now, running ``job_id`` (None when idle)."""
    session.execute(
        update(Worker).where(Worker.name == name).values(last_seen_at=now or utcnow(), job_id=job_id, stopped_at=None)
    )


def stop_worker(*, session: Session, name: str, now: datetime | None = None) -> None:
    """The worker exits: it is reported dead from now on."""
    session.execute(update(Worker).where(Worker.name == name).values(stopped_at=now or utcnow(), job_id=None))


def list_workers(
    *, session: Session, alive_within_s: float = ALIVE_WITHIN_S, now: datetime | None = None
) -> list[WorkerRecord]:
    """Every registered worker, live ones first, then by name."""
    now = now or utcnow()
    rows = session.execute(
        select(Worker, Device, Toolchain)
        .join(Device, Worker.device_id == Device.id)
        .join(Toolchain, Worker.toolchain_id == Toolchain.id)
        .order_by(Worker.name)
    ).all()
    records = [_record(row, now, alive_within_s) for row in rows]
    return sorted(records, key=lambda w: (not w.alive, w.name))


def _get(session: Session, name: str, now: datetime) -> WorkerRecord:
    row = session.execute(
        select(Worker, Device, Toolchain)
        .join(Device, Worker.device_id == Device.id)
        .join(Toolchain, Worker.toolchain_id == Toolchain.id)
        .where(Worker.name == name)
        .execution_options(populate_existing=True)
    ).one()
    return _record(row, now, ALIVE_WITHIN_S)


def _record(row: Any, now: datetime, alive_within_s: float) -> WorkerRecord:
    worker, device, toolchain = row
    alive = worker.stopped_at is None and worker.last_seen_at >= now - timedelta(seconds=alive_within_s)
    return WorkerRecord(
        name=worker.name,
        target=worker.target,
        queue=worker.queue,
        device=device_info(device),
        toolchain=toolchain_info(toolchain),
        host=worker.host,
        pid=worker.pid,
        started_at=worker.started_at,
        last_seen_at=worker.last_seen_at,
        stopped_at=worker.stopped_at,
        job_id=worker.job_id,
        alive=alive,
    )
