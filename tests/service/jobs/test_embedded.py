"""The in-process executor of `warpmap serve` on SQLite: it registers its device, resumes what an earlier
service left unfinished, runs what it is handed, and leaves jobs of queues it does not serve alone."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from sqlalchemy.engine import Engine

from compiler.backends import Target
from db import get_job, list_workers, session_scope, start_job
from service.jobs.embedded import EmbeddedExecutor
from service.jobs.runner import WorkerIdentity
from tests.service.jobs.conftest import REDUCE, SOFTMAX


def _status(engine: Engine, job_id: int) -> str:
    with session_scope(engine) as session:
        return get_job(session=session, job_id=job_id).status


def _wait_ended(engine: Engine, job_ids: list[int], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(_status(engine, j) not in ("queued", "running") for j in job_ids):
            return
        time.sleep(0.1)
    raise AssertionError(f"jobs {job_ids} did not end within {timeout_s:g} s")


def test_the_executor_resumes_unfinished_jobs_and_runs_new_ones(sqlite_engine: Engine, sqlite_url: str, cpu: Target,
                                                                cpu_worker: WorkerIdentity,
                                                                submit: Callable) -> None:
    orphan = submit(sqlite_engine, SOFTMAX, trials=2)
    with session_scope(sqlite_engine) as session:  # a service that died while running it
        start_job(session=session, job_id=orphan.id, worker="gone:1:cpu")
    elsewhere = submit(sqlite_engine, SOFTMAX, trials=3,
                       worker=replace(cpu_worker, queue="cuda:sm_90:00000000",
                                      device=replace(cpu_worker.device, name="NVIDIA H200")))
    executor = EmbeddedExecutor(sqlite_engine, sqlite_url, [(cpu_worker, cpu)], heartbeat_s=0.2)
    executor.start(host="test-host", pid=1)
    try:
        fresh = submit(sqlite_engine, REDUCE, trials=2)
        executor.enqueue(fresh)
        executor.enqueue(fresh)  # a second hand-over of the same job is ignored
        with session_scope(sqlite_engine) as session:
            (registered,) = list_workers(session=session)
        assert (registered.name, registered.target, registered.queue) == (cpu_worker.name, "cpu", cpu_worker.queue)
        assert registered.alive and registered.device.key == cpu_worker.device.key
        _wait_ended(sqlite_engine, [orphan.id, fresh.id])
    finally:
        executor.stop()
    with session_scope(sqlite_engine) as session:
        resumed, ran, waiting = (get_job(session=session, job_id=j.id) for j in (orphan, fresh, elsewhere))
        (stopped,) = list_workers(session=session)
    assert (resumed.status, resumed.attempts) == ("succeeded", 2)
    assert (ran.status, ran.attempts) == ("succeeded", 1)
    assert waiting.status == "queued" and waiting.attempts == 0  # no local device serves its queue
    assert stopped.stopped_at is not None and not stopped.alive
