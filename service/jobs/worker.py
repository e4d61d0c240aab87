"""One cluster worker process (``warpmap worker``): one device, one queue, one tuning at a time.

The procrastinate worker fetches the next job of the device's queue (LISTEN/NOTIFY, polling as a
fallback), the tuning runs in a thread beside its event loop (so procrastinate's heartbeat goes on
during a long trial), every candidate is measured in a spawned child process (``search.tune``), and a
side task retries the jobs of workers that stopped heartbeating. SIGTERM or SIGINT: no new job is taken,
the running trial ends, the job is released and deferred again for another worker, then the process
exits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import OperationalError

import db
from db.errors import UnavailableError
from db.session import create_engine_for, session_scope
from service.jobs.cluster import TASK_NAME, defer_part_async, make_app, retry_stalled_forever
from service.jobs.devices import default_worker_name, identity, open_target
from service.jobs.heartbeat import Heartbeat
from service.jobs.runner import Outcome, run_job_through_outages
from service.jobs.storage import open_storage

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerConfig:
    """What one worker process needs; the timings come from the settings (``WARPMAP_WORKER_*``)."""

    url: str
    target: str
    name: str | None = None
    heartbeat_s: float = 5.0
    stalled_after_s: float = 30.0
    stalled_check_s: float = 10.0
    poll_s: float = 5.0
    db_retry_s: float = 10.0
    db_retries: int = 30
    #: Parts per job (``WARPMAP_WORKER_STUDY_PARTS``): above 1, several workers share each job's study.
    study_parts: int = 1


def run_worker(config: WorkerConfig) -> None:
    """Serve the target's queue until SIGTERM or SIGINT (see the module docstring)."""
    import procrastinate

    target, target_name = open_target(config.target)
    worker = identity(target, config.name or default_worker_name(target_name), target_name)
    engine = create_engine_for(config.url)
    storage = open_storage(config.url)
    app = make_app(config.url)
    stopping = threading.Event()
    running: dict[str, int | None] = {worker.name: None}
    heartbeat = Heartbeat(engine, lambda: dict(running), config.heartbeat_s)

    # A database that goes away mid-job (a restart) fails the attempt, not the job: the runner waits for
    # it and runs the job again; past its patience, procrastinate tries the job again later. Either way
    # the study resumes where the last recorded trial left it.
    retry = procrastinate.RetryStrategy(max_attempts=config.db_retries, wait=int(config.db_retry_s),
                                        retry_exceptions={OperationalError, UnavailableError})

    own: set[int] = set()  # procrastinate job ids running here: never retried as stalled by this process

    @app.task(name=TASK_NAME, retry=retry, pass_context=True)
    async def run_tuning(context: Any, job_id: int, part: int = 0) -> str:
        running[worker.name] = job_id
        own.add(context.job.id)
        try:
            outcome = await asyncio.to_thread(run_job_through_outages, job_id, engine=engine, storage=storage,
                                              worker=worker, target=target, stopping=stopping,
                                              shared=config.study_parts > 1)
        finally:
            running[worker.name] = None
            own.discard(context.job.id)
        if outcome is Outcome.RELEASED:
            await defer_part_async(app, job_id, worker.queue, part)
        logger.info("job %s (part %s) on %s: %s", job_id, part, worker.name, outcome.value)
        return outcome.value

    with session_scope(engine) as session:
        db.register_worker(session=session, name=worker.name, target=worker.target, queue=worker.queue,
                           device=worker.device, toolchain=worker.toolchain, host=socket.gethostname(),
                           pid=os.getpid())
    heartbeat.start()
    print(f"warpmap worker {worker.name}: queue {worker.queue}", flush=True)
    try:
        asyncio.run(_serve(app, config, worker.queue, stopping, lambda: set(own)))
    finally:
        heartbeat.stop()
        try:
            with session_scope(engine) as session:
                db.stop_worker(session=session, name=worker.name)
        finally:
            storage.engine.dispose()
            engine.dispose()


async def _serve(app: Any, config: WorkerConfig, queue: str, stopping: threading.Event,
                 own: Callable[[], set[int]]) -> None:
    loop = asyncio.get_running_loop()
    async with app.open_async():
        retrier = asyncio.create_task(retry_stalled_forever(
            app, queue, every_s=config.stalled_check_s, seconds_since_heartbeat=config.stalled_after_s,
            confirm_after_s=2 * config.heartbeat_s, own=own))
        work: asyncio.Task[None] | None = None

        def stop() -> None:
            # The trial in progress ends, its job is released; procrastinate waits for that, then leaves.
            if not stopping.is_set():
                logger.info("stopping: the running trial ends, then its job goes back to the queue")
                stopping.set()
                if work is not None:
                    work.cancel()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        try:
            while not stopping.is_set():
                work = asyncio.create_task(app.run_worker_async(
                    queues=[queue], concurrency=1, name=queue, install_signal_handlers=False,
                    update_heartbeat_interval=config.heartbeat_s, stalled_worker_timeout=config.stalled_after_s,
                    fetch_job_polling_interval=config.poll_s, delete_jobs="successful"))
                try:
                    await work
                except asyncio.CancelledError:
                    if not stopping.is_set():
                        raise
                if not stopping.is_set():
                    # procrastinate stops its worker when a side task fails (its heartbeat, through a
                    # database outage longer than its pool waits): start it again once that passes.
                    logger.warning("the queue worker stopped on its own; starting it again in %g s", config.poll_s)
                    await asyncio.sleep(config.poll_s)
        finally:
            retrier.cancel()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
