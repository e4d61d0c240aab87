"""procrastinate on the warpmap database: its schema comes with `warpmap db upgrade`, the dispatcher
queues one job per tuning on the tuning's queue and drops it on cancel, and the jobs of a worker that
stopped heartbeating are put back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import inspect, text

from db import create_engine_for, current_revision, downgrade, upgrade
from db.records import DeviceInfo, JobRecord, ToolchainInfo, WorkloadSpec
from service.jobs.cluster import TASK_NAME, ProcrastinateDispatcher, conninfo, make_app, part_lock, retry_stalled

pytestmark = pytest.mark.postgres

PROCRASTINATE_TABLES = {"procrastinate_jobs", "procrastinate_workers", "procrastinate_events",
                        "procrastinate_periodic_defers"}


@pytest.fixture
def pg_url(postgres_server: Any, postgres_template: str) -> str:
    return postgres_server.url(postgres_server.create_database(template=postgres_template))


def _tables(url: str) -> set[str]:
    engine = create_engine_for(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_the_queue_schema_comes_and_goes_with_revision_0007(postgres_server: Any) -> None:
    url = postgres_server.url(postgres_server.create_database())
    upgrade(url, "0005")
    assert not _tables(url) & PROCRASTINATE_TABLES
    upgrade(url, "0007")
    assert current_revision(url) == "0007" and _tables(url) >= PROCRASTINATE_TABLES
    app = make_app(url, sync=True)
    with app.open():
        assert app.check_connection()  # procrastinate finds its own schema
    downgrade(url, "0005")
    assert not _tables(url) & PROCRASTINATE_TABLES
    engine = create_engine_for(url)
    try:
        with engine.connect() as connection:
            left = connection.execute(text(
                "SELECT count(*) FROM pg_proc WHERE proname LIKE 'procrastinate%'")).scalar_one()
            types = connection.execute(text(
                "SELECT count(*) FROM pg_type WHERE typname LIKE 'procrastinate%'")).scalar_one()
    finally:
        engine.dispose()
    assert (left, types) == (0, 0)
    upgrade(url)
    assert _tables(url) >= PROCRASTINATE_TABLES


def test_conninfo_keeps_the_statement_timeout_option() -> None:
    info = conninfo("postgresql+psycopg://wm:p%20w@db.example:5433/tuning?connect_timeout=10"
                    "&options=-c+statement_timeout%3D300000")
    assert "password='p w'" in info and "options='-c statement_timeout=300000'" in info and "port=5433" in info
    with pytest.raises(ValueError, match="PostgreSQL"):
        conninfo("sqlite:///x.db")


def _job(job_id: int, queue: str) -> JobRecord:
    now = datetime.now().astimezone()
    return JobRecord(id=job_id, workload=WorkloadSpec(op="softmax", spec={}), device=DeviceInfo("d", "a", "v"),
                     toolchain=ToolchainInfo("w", "n", "h"), status="queued", strategy="default", budget={},
                     progress={}, attempts=0, error=None, created_at=now,
                     started_at=None, finished_at=None, updated_at=now, target="cpu", queue=queue, options={},
                     worker=None)


@pytest.fixture
def app(pg_url: str) -> Iterator[Any]:
    app = make_app(pg_url, sync=True)
    with app.open():
        yield app


def test_one_waiting_job_per_tuning_on_its_queue_dropped_on_cancel(pg_url: str, app: Any) -> None:
    dispatcher = ProcrastinateDispatcher(pg_url, parts=2)
    try:
        dispatcher.enqueue(_job(7, "cpu:x86_64:abcd"))
        dispatcher.enqueue(_job(7, "cpu:x86_64:abcd"))  # joined: no second copy
        waiting = list(app.job_manager.list_jobs(task=TASK_NAME, status="todo"))
        assert sorted(j.queueing_lock for j in waiting) == [part_lock(7, 0), part_lock(7, 1)]
        assert {j.queue for j in waiting} == {"cpu:x86_64:abcd"} and {j.lock for j in waiting} == {
            part_lock(7, 0), part_lock(7, 1)}
        assert all(j.task_kwargs["job_id"] == 7 for j in waiting)
        dispatcher.cancel(7)
        assert list(app.job_manager.list_jobs(task=TASK_NAME, status="todo")) == []
    finally:
        dispatcher.close()


def test_the_jobs_of_a_silent_worker_are_put_back(pg_url: str, app: Any) -> None:
    async def scenario() -> tuple[list[int], list[int], str]:
        async_app = make_app(pg_url)
        async with async_app.open_async():
            manager = async_app.job_manager
            await async_app.configure_task(name=TASK_NAME, queue="q", lock="l", queueing_lock="l").defer_async(
                job_id=1, part=0)
            worker_id = await manager.register_worker()
            job = await manager.fetch_job(queues=["q"], worker_id=worker_id)
            assert job is not None
            fresh, _ = await retry_stalled(async_app, "q", 30, suspects=set())  # it still heartbeats
            await async_app.connector.execute_query_async(
                "UPDATE procrastinate_workers SET last_heartbeat = now() - interval '1 minute'")
            other_queue, _ = await retry_stalled(async_app, "elsewhere", 30, suspects=set())
            mine, _ = await retry_stalled(async_app, "q", 30, own=lambda: {job.id})  # this process runs it
            first_look, suspects = await retry_stalled(async_app, "q", 30, suspects=set())  # seen once: wait
            assert suspects == {job.id}
            stalled, _ = await retry_stalled(async_app, "q", 30, suspects=suspects)  # still stalled: retried
            status = await manager.get_job_status_async(job.id)
            return fresh + other_queue + mine + first_look, stalled, status.value

    untouched, retried, status = asyncio.run(scenario())
    assert untouched == [] and len(retried) == 1 and status == "todo"
