"""The job engine: how a tuning the API accepted reaches a device, and runs there.

The API calls only :class:`Dispatcher` (``enqueue`` a job ``submit_job`` just created, ``cancel`` one
after ``cancel_job``); :func:`dispatcher_for` picks the engine from the database URL:

- PostgreSQL: procrastinate (``service.jobs.cluster``), each job deferred to its device kind's queue, run
  by ``warpmap worker`` processes (``service.jobs.worker``), one per GPU or host;
- SQLite: the in-process executor of ``warpmap serve`` (``service.jobs.embedded``), one thread per
  local device. :func:`dispatcher_for` cannot build that one (it needs the running service's devices):
  ``warpmap serve`` builds it and hands it to the app.

Either way the job itself runs through ``service.jobs.runner.run_job``.
"""

from __future__ import annotations

from typing import Protocol

from db.records import JobRecord
from service.settings import Settings


class Dispatcher(Protocol):
    def enqueue(self, job: JobRecord) -> None:
        """Run ``job`` (just created by ``submit_job``) on a worker of ``job.queue``."""

    def cancel(self, job_id: int) -> None:
        """After ``cancel_job``: drop the job if it waits; a running one stops after its trial."""


class QueuedOnly:
    """The dispatcher of an API served without executors (``warpmap serve --workers 0`` on SQLite):
    jobs stay queued in ``wm_jobs`` until a service with executors starts on the same database."""

    def enqueue(self, job: JobRecord) -> None:
        return None

    def cancel(self, job_id: int) -> None:
        return None


def dispatcher_for(settings: Settings) -> Dispatcher:
    """procrastinate on PostgreSQL; on SQLite, jobs wait in ``wm_jobs`` for ``warpmap serve``'s executor
    (which the embedded service passes to the app itself)."""
    if settings.database_url.startswith("postgresql"):
        from service.jobs.cluster import ProcrastinateDispatcher

        return ProcrastinateDispatcher(settings.database_url, parts=settings.worker_study_parts)
    return QueuedOnly()


__all__ = ["Dispatcher", "QueuedOnly", "dispatcher_for"]
