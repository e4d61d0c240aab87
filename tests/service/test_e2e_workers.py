"""The cluster end to end: a real PostgreSQL, `warpmap worker` processes on the host, jobs submitted as
the API submits them (``submit_job`` + the procrastinate dispatcher).

- two workers tune two small workloads; one is SIGKILLed mid-job; its job is retried on the other worker
  (stalled-job retry on procrastinate's heartbeats) and resumes its study: both jobs succeed, the killed
  job's earlier trials are kept as they were and no point is measured twice;
- a worker tuning while the database restarts waits for it and goes on with the study; sent SIGTERM, it
  ends its trial, releases the job and defers it again, then exits 0.

The figures it measures (pick-up latency, time from the kill to the retry) are printed (``pytest -s``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from db import (
    JobRecord,
    create_engine_for,
    get_job,
    list_trials,
    list_workers,
    lookup_kernel,
    session_scope,
    submit_job,
)
from service.jobs.cluster import ProcrastinateDispatcher, make_app, part_lock
from tests.service.jobs.conftest import REDUCE, SOFTMAX, spec_workload

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

@pytest.fixture
def cluster_url(postgres_server: Any, postgres_template: str) -> str:
    return postgres_server.url(postgres_server.create_database(template=postgres_template))


@pytest.fixture
def cluster_engine(cluster_url: str) -> Iterator[Engine]:
    engine = create_engine_for(cluster_url)
    yield engine
    engine.dispose()


@pytest.fixture
def start_worker(cluster_url: str, warpmap_process: Callable[..., subprocess.Popen[bytes]]
                 ) -> Callable[[str], subprocess.Popen[bytes]]:
    """``start_worker(name)``: a `warpmap worker --target cpu` process on the cluster's database."""

    def start(name: str) -> subprocess.Popen[bytes]:
        return warpmap_process(name, "worker", "--database", cluster_url, "--target", "cpu", "--name", name)

    return start


def _wait(what: str, condition: Callable[[], Any], timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def _submit(engine: Engine, dispatcher: ProcrastinateDispatcher, spec: dict[str, Any], trials: int) -> JobRecord:
    from compiler.backends import get_target
    from service.jobs.devices import identity

    worker = identity(get_target("cpu"), "submitter", "cpu")
    with session_scope(engine) as session:
        job, created = submit_job(session=session, workload=spec_workload(spec), device=worker.device,
                                  toolchain=worker.toolchain, strategy="default", budget={"trials": trials},
                                  target="cpu", queue=worker.queue, options={"level": 2, "seed": 0, "timeout_s": 60})
    assert created
    dispatcher.enqueue(job)
    return job


def _job(engine: Engine, job_id: int) -> JobRecord:
    with session_scope(engine) as session:
        return get_job(session=session, job_id=job_id)


def _trials(engine: Engine, job_id: int) -> list[Any]:
    with session_scope(engine) as session:
        return [t.result for t in list_trials(session=session, job_id=job_id)]


def _alive(engine: Engine, names: set[str]) -> bool:
    with session_scope(engine) as session:
        return names <= {w.name for w in list_workers(session=session, alive_within_s=5) if w.alive}


def test_a_killed_worker_s_job_resumes_on_the_other_and_both_complete(
        cluster_url: str, cluster_engine: Engine, start_worker: Callable[[str], subprocess.Popen[bytes]]) -> None:
    workers = {name: start_worker(name) for name in ("worker-a", "worker-b")}
    _wait("both workers to register", lambda: _alive(cluster_engine, set(workers)), timeout_s=60)
    dispatcher = ProcrastinateDispatcher(cluster_url)
    try:
        submitted = time.time()
        jobs = [_submit(cluster_engine, dispatcher, spec, trials=8) for spec in (SOFTMAX, REDUCE)]
        # Kill the worker of whichever job first has two trials recorded, while it is mid-job.
        victim_job = _wait("a job with two trials", lambda: next(
            (j for j in jobs if len(_trials(cluster_engine, j.id)) >= 2 and _job(cluster_engine, j.id).worker), None))
        running = _job(cluster_engine, victim_job.id)
        pickup_s = [(_job(cluster_engine, j.id).started_at.timestamp() - submitted) for j in jobs]
        os.kill(workers[running.worker].pid, signal.SIGKILL)
        killed_at = time.time()
        kept = _trials(cluster_engine, victim_job.id)
        assert 2 <= len(kept) < 8
        survivor = ({"worker-a", "worker-b"} - {running.worker}).pop()
        app = make_app(cluster_url, sync=True)
        # The stalled-job retry puts it back in the queue; a survivor that has just ended its own job may
        # take it over within milliseconds, so the retry is seen in the attempt count, not a "todo" status.
        with app.open():
            _wait("the retry", lambda: [j for j in app.job_manager.list_jobs(
                queueing_lock=part_lock(victim_job.id, 0)) if j.attempts >= 1], timeout_s=60)
        requeued_s = time.time() - killed_at

        done = {j.id: _wait(f"job {j.id} to end", lambda j=j: (lambda r: r if r.status not in ("queued", "running")
                                                                 else None)(_job(cluster_engine, j.id)), 150)
                for j in jobs}
    finally:
        dispatcher.close()
    for job in jobs:
        assert done[job.id].status == "succeeded", done[job.id].error
        trials = _trials(cluster_engine, job.id)
        points = [tuple(sorted(t.params.items())) for t in trials]
        assert len(points) == len(set(points)), "a point was measured twice"
        # 8 evaluated; the trial cut short by the kill may be recorded too (its point is never re-proposed).
        assert 8 <= len(trials) <= 9
        with session_scope(cluster_engine) as session:
            hit = lookup_kernel(session=session, workload=job.workload, device=job.device, toolchain=job.toolchain,
                                record_hit=False)
        assert hit is not None
    resumed = _trials(cluster_engine, victim_job.id)
    assert resumed[:len(kept)] == kept  # the killed attempt's trials are kept exactly
    final = done[victim_job.id]
    assert final.attempts == 2
    retry_s = final.started_at.timestamp() - killed_at
    print(f"\npick-up after submit: {', '.join(f'{s:.2f} s' for s in pickup_s)}; killed {running.worker} "
          f"(job {victim_job.id}, {len(kept)} trials kept); back in the queue {requeued_s:.2f} s after the kill, "
          f"{survivor} took it over after {retry_s:.2f} s")


def _restart(server: Any) -> float:
    """Stop the session's PostgreSQL server (fast: clients are cut off) and start it again on its port."""
    from tests.conftest import SERVER_OPTIONS

    began = time.monotonic()
    pg_ctl = str(server.bin_dir / "pg_ctl")
    subprocess.run(server._as_owner(pg_ctl, "-D", str(server.data_dir), "-m", "fast", "-w", "stop"), check=True,
                   capture_output=True, timeout=60)
    time.sleep(1.0)  # a moment with no server at all
    options = f"-c listen_addresses=127.0.0.1 -p {server.port} -k {server.root} {SERVER_OPTIONS}"
    subprocess.run(server._as_owner(pg_ctl, "-D", str(server.data_dir), "-l", str(server.log_file), "-o", options,
                                    "-w", "-t", "60", "start"), check=True, capture_output=True, timeout=90)
    return time.monotonic() - began


def test_a_database_restart_is_survived_and_sigterm_releases_the_job(
        cluster_url: str, cluster_engine: Engine, postgres_server: Any,
        start_worker: Callable[[str], subprocess.Popen[bytes]]) -> None:
    worker = start_worker("worker-t")
    _wait("the worker to register", lambda: _alive(cluster_engine, {"worker-t"}), timeout_s=60)
    dispatcher = ProcrastinateDispatcher(cluster_url)
    try:
        job = _submit(cluster_engine, dispatcher, REDUCE, trials=40)
    finally:
        dispatcher.close()
    _wait("two trials", lambda: len(_trials(cluster_engine, job.id)) >= 2)
    cluster_engine.dispose()  # its pooled connections die with the server
    down_s = _restart(postgres_server)
    restarted = len(_trials(cluster_engine, job.id))
    # The worker waits for the database, takes the job back and goes on with the study.
    _wait("trials after the restart", lambda: len(_trials(cluster_engine, job.id)) >= restarted + 2)
    assert _job(cluster_engine, job.id).status == "running" and worker.poll() is None
    worker.send_signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    assert worker.wait(timeout=60) == 0
    exit_s = time.monotonic() - stopped_at
    released = _job(cluster_engine, job.id)
    # A restart that hits a database call mid-job fails the attempt and the worker takes the job back
    # (attempts 2); one that falls between calls (a batch compiling) is only seen by the pool, which
    # reconnects (attempts 1). Which of the two happens is timing; both are survived.
    assert released.status == "queued" and released.worker is None and released.attempts in (1, 2)
    trials = _trials(cluster_engine, job.id)
    points = [tuple(sorted(t.params.items())) for t in trials]
    assert restarted + 2 <= len(trials) < 40 and len(points) == len(set(points))
    app = make_app(cluster_url, sync=True)
    with app.open():
        waiting = list(app.job_manager.list_jobs(queueing_lock=part_lock(job.id, 0), status="todo"))
    assert len(waiting) == 1 and waiting[0].queue == job.queue  # deferred again, for the next worker
    print(f"\ndatabase down and up in {down_s:.1f} s, {restarted} trials before, {len(trials)} at SIGTERM; "
          f"SIGTERM to exit: {exit_s:.2f} s")
