"""The cluster's job engine: procrastinate on the warpmap PostgreSQL database.

A ``wm_jobs`` row is the job the API reports; a procrastinate job on the row's ``queue`` (the device
kind) carries its id to a worker. Procrastinate gives what ``db/jobs.py``'s leases used to: a durable
queue with LISTEN/NOTIFY pick-up, one pending job per tuning (``queueing_lock``), never two workers on
one part of a tuning (``lock``), and worker heartbeats. Each ``warpmap worker`` also looks for jobs whose
worker stopped heartbeating (killed, its host gone) and retries them (``get_stalled_jobs`` +
``retry_job``): the next worker takes the tuning over and resumes its Optuna study.

A tuning may be split into ``parts`` procrastinate jobs that run at once on several workers of the same
kind, sharing the study (each proposes from what all have measured); one part is the default.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import make_url

from db.records import JobRecord

logger = logging.getLogger(__name__)

TASK_NAME = "warpmap.run_tuning"


def conninfo(url: str) -> str:
    """The libpq ``key=value`` connection string of a SQLAlchemy PostgreSQL URL (``postgresql+psycopg://...``).

    Built from the URL's parts, not by renaming its scheme: libpq reads no ``+`` as a space in a URI's
    query, which would garble the ``options`` that carry the statement time-out.
    """
    from psycopg.conninfo import make_conninfo

    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ValueError(f"the cluster's job engine needs PostgreSQL, not {parsed.get_backend_name()}")
    parts = {"host": parsed.host, "port": parsed.port, "user": parsed.username, "password": parsed.password,
             "dbname": parsed.database}
    query = {key: value if isinstance(value, str) else value[-1] for key, value in parsed.query.items()}
    return make_conninfo("", **{k: v for k, v in {**parts, **query}.items() if v is not None})


def part_lock(job_id: int, part: int) -> str:
    """The procrastinate lock and queueing lock of one part of a tuning."""
    return f"wm-job-{job_id}" if part == 0 else f"wm-job-{job_id}-part-{part}"


def make_app(url: str, *, sync: bool = False) -> Any:
    """A procrastinate app on the database at ``url`` (a synchronous connector for deferring from
    threads, the asynchronous one for a worker)."""
    import procrastinate  # here: only the cluster needs it

    connector_class = procrastinate.SyncPsycopgConnector if sync else procrastinate.PsycopgConnector
    return procrastinate.App(connector=connector_class(conninfo=conninfo(url)))


def defer_part(app: Any, job_id: int, queue: str, part: int) -> bool:
    """Queue part ``part`` of job ``job_id``; False when that part is already waiting."""
    from procrastinate.exceptions import AlreadyEnqueued

    lock = part_lock(job_id, part)
    try:
        app.configure_task(name=TASK_NAME, queue=queue, lock=lock, queueing_lock=lock).defer(job_id=job_id,
                                                                                             part=part)
    except AlreadyEnqueued:
        return False
    return True


async def defer_part_async(app: Any, job_id: int, queue: str, part: int) -> bool:
    from procrastinate.exceptions import AlreadyEnqueued

    lock = part_lock(job_id, part)
    try:
        await app.configure_task(name=TASK_NAME, queue=queue, lock=lock, queueing_lock=lock).defer_async(
            job_id=job_id, part=part)
    except AlreadyEnqueued:
        return False
    return True


class ProcrastinateDispatcher:
    """The API's :class:`~service.jobs.Dispatcher` on PostgreSQL: a new job goes to its queue."""

    def __init__(self, url: str, *, parts: int = 1) -> None:
        if parts < 1:
            raise ValueError(f"a tuning runs in at least one part, got {parts}")
        self._app = make_app(url, sync=True)
        self._parts = parts
        self._opened = False

    def _open(self) -> Any:
        if not self._opened:
            self._app.open()
            self._opened = True
        return self._app

    def enqueue(self, job: JobRecord) -> None:
        app = self._open()
        for part in range(self._parts):
            defer_part(app, job.id, job.queue, part)

    def cancel(self, job_id: int) -> None:
        """Drop the job's waiting parts; a running part stops after its trial (it reads the status)."""
        app = self._open()
        for part in range(self._parts):
            for waiting in app.job_manager.list_jobs(queueing_lock=part_lock(job_id, part), status="todo"):
                app.job_manager.cancel_job_by_id(waiting.id)

    def close(self) -> None:
        if self._opened:
            self._app.close()
            self._opened = False


async def retry_stalled(app: Any, queue: str, seconds_since_heartbeat: float, *, suspects: set[int] | None = None,
                        own: Callable[[], set[int]] = set) -> tuple[list[int], set[int]]:
    """Put back the jobs of ``queue`` whose worker stopped heartbeating; returns (retried ids, stalled ids).

    With ``suspects`` (the stalled ids of the previous look), only jobs stalled both times are retried:
    after a database outage every worker's heartbeat is stale until its next beat, and a live worker's job
    must not be taken from it. ``own`` names the jobs this process runs, never retried from here.
    """
    stalled = {job.id: job for job in await app.job_manager.get_stalled_jobs(
        queue=queue, task_name=TASK_NAME, seconds_since_heartbeat=seconds_since_heartbeat)}
    mine = own()
    retried = []
    for job_id, job in stalled.items():
        if job_id in mine or (suspects is not None and job_id not in suspects):
            continue
        try:
            await app.job_manager.retry_job(job)
        except Exception as exc:  # another worker retried it first, or it ended meanwhile
            logger.info("stalled job %s not retried here: %s", job_id, exc)
            continue
        retried.append(job_id)
    return retried, set(stalled) - set(retried)


async def retry_stalled_forever(app: Any, queue: str, *, every_s: float, seconds_since_heartbeat: float,
                                confirm_after_s: float, own: Callable[[], set[int]] = set) -> None:
    """Look for stalled jobs every ``every_s`` seconds and retry those still stalled ``confirm_after_s``
    (at least two heartbeats) after they were first seen."""
    suspects: set[int] = set()
    while True:
        await asyncio.sleep(max(every_s, confirm_after_s) if suspects else every_s)
        try:
            retried, suspects = await retry_stalled(app, queue, seconds_since_heartbeat, suspects=suspects, own=own)
        except Exception as exc:  # the database restarting: look again next time
            logger.warning("looking for stalled jobs failed: %s", exc)
            suspects = set()
            continue
        if retried:
            logger.warning("retried stalled jobs %s (their worker stopped heartbeating)", retried)
