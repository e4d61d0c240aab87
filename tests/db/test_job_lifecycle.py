"""A job's life as the job engine drives it, on both databases: start, progress, end, release, cancel."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.engine import Engine

from db import (
    NotFoundError,
    cancel_job,
    end_job,
    get_job,
    list_workers,
    record_progress,
    register_worker,
    release_job,
    session_scope,
    start_job,
    stop_worker,
    submit_job,
    touch_worker,
)

T0 = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)


@pytest.fixture
def job_id(engine: Engine, workload, device, toolchain) -> int:
    with session_scope(engine) as session:
        job, created = submit_job(session=session, workload=workload, device=device, toolchain=toolchain,
                                  strategy="default", budget={"trials": 8}, target="cuda:1", queue="cuda:sm_90:ab12",
                                  options={"level": 2, "seed": 3, "timeout_s": 60.0})
    assert created
    return job.id


def test_a_job_keeps_its_target_queue_and_options(engine: Engine, job_id: int, workload, device, toolchain) -> None:
    with session_scope(engine) as session:
        job = get_job(session=session, job_id=job_id)
        joined, created = submit_job(session=session, workload=workload, device=device, toolchain=toolchain,
                                     strategy="tpe", budget={}, target="cuda", queue="other", options={"level": 1})
    assert (job.target, job.queue, dict(job.options)) == ("cuda:1", "cuda:sm_90:ab12",
                                                          {"level": 2, "seed": 3, "timeout_s": 60.0})
    assert job.status == "queued" and job.worker is None
    assert not created and joined.id == job_id and joined.queue == "cuda:sm_90:ab12" and joined.strategy == "default"


def test_start_progress_end(engine: Engine, job_id: int) -> None:
    with session_scope(engine) as session:
        started = start_job(session=session, job_id=job_id, worker="w1", now=T0)
        assert started is not None and (started.status, started.worker, started.attempts) == ("running", "w1", 1)
        progressed = record_progress(session=session, job_id=job_id, progress={"trials_done": 3, "best_ms": 0.5})
        assert progressed.progress == {"trials_done": 3, "best_ms": 0.5} and progressed.status == "running"
        ended = end_job(session=session, job_id=job_id, status="succeeded")
    assert (ended.status, ended.worker, ended.error) == ("succeeded", None, None) and ended.finished_at is not None
    with session_scope(engine) as session:
        assert start_job(session=session, job_id=job_id, worker="w2") is None  # an ended job is not run again
        assert record_progress(session=session, job_id=job_id, progress={"x": 1}).progress == {"trials_done": 3,
                                                                                                 "best_ms": 0.5}


def test_a_job_taken_over_counts_another_attempt_and_failures_keep_their_error(engine: Engine, job_id: int) -> None:
    with session_scope(engine) as session:
        start_job(session=session, job_id=job_id, worker="w1")
        again = start_job(session=session, job_id=job_id, worker="w2")
        assert again is not None and (again.worker, again.attempts) == ("w2", 2)
        failed = end_job(session=session, job_id=job_id, status="failed", error="no correct candidate")
    assert (failed.status, failed.error) == ("failed", "no correct candidate")
    with pytest.raises(ValueError, match="succeeded' or 'failed"), session_scope(engine) as session:
        end_job(session=session, job_id=job_id, status="cancelled")


def test_cancel_is_seen_through_progress_and_survives_the_end(engine: Engine, job_id: int) -> None:
    with session_scope(engine) as session:
        start_job(session=session, job_id=job_id, worker="w1")
        cancel_job(session=session, job_id=job_id)
        seen = record_progress(session=session, job_id=job_id, progress={"trials_done": 1})
        assert seen.status == "cancelled" and seen.worker is None
        assert end_job(session=session, job_id=job_id, status="succeeded").status == "cancelled"
        assert start_job(session=session, job_id=job_id, worker="w2") is None


def test_release_gives_the_job_back_to_its_queue(engine: Engine, job_id: int) -> None:
    with session_scope(engine) as session:
        start_job(session=session, job_id=job_id, worker="w1")
        released = release_job(session=session, job_id=job_id)
        assert (released.status, released.worker) == ("queued", None)
        restarted = start_job(session=session, job_id=job_id, worker="w2")
    assert restarted is not None and restarted.attempts == 2
    with session_scope(engine) as session, pytest.raises(NotFoundError):
        start_job(session=session, job_id=job_id + 1000, worker="w1")


def test_workers_register_beat_and_die(engine: Engine, job_id: int, device, toolchain) -> None:
    with session_scope(engine) as session:
        first = register_worker(session=session, name="gpu0@host", target="cuda:0", queue="cuda:sm_90:ab12",
                                device=device, toolchain=toolchain, host="host", pid=41, now=T0)
        register_worker(session=session, name="cpu@host", target="cpu", queue="cpu:x86_64:cd34", device=device,
                        toolchain=toolchain, host="host", pid=42, now=T0)
    assert (first.started_at, first.pid, first.queue, first.job_id) == (T0, 41, "cuda:sm_90:ab12", None)
    with session_scope(engine) as session:
        touch_worker(session=session, name="gpu0@host", job_id=job_id, now=T0 + timedelta(seconds=20))
        workers = list_workers(session=session, now=T0 + timedelta(seconds=40))
    by_name = {w.name: w for w in workers}
    assert [w.name for w in workers] == ["gpu0@host", "cpu@host"]  # the live one first
    assert by_name["gpu0@host"].alive and by_name["gpu0@host"].job_id == job_id
    assert not by_name["cpu@host"].alive  # not seen for 40 s
    assert by_name["gpu0@host"].device == device and by_name["gpu0@host"].toolchain == toolchain
    with session_scope(engine) as session:
        stop_worker(session=session, name="gpu0@host", now=T0 + timedelta(seconds=41))
        again = register_worker(session=session, name="cpu@host", target="cpu", queue="cpu:x86_64:cd34",
                                device=device, toolchain=toolchain, host="host", pid=99, now=T0 + timedelta(seconds=41))
        workers = {w.name: w for w in list_workers(session=session, now=T0 + timedelta(seconds=42))}
    assert not workers["gpu0@host"].alive and workers["gpu0@host"].job_id is None
    assert again.pid == 99 and workers["cpu@host"].alive and len(workers) == 2  # taken back by name
