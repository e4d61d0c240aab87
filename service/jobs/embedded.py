"""The in-process executor of ``warpmap serve``: one thread per local device runs that device's jobs.

No other server to start: the jobs are the ``wm_jobs`` rows, so the executor needs no queue of its own
beyond the ids it was handed. At start it takes up every unfinished job of its queues (queued, or
running when the service stopped without releasing it: a crash, a power cut), so a restarted service
resumes them, each from its Optuna study. ``stop`` lets every running trial end, then releases the jobs
they belonged to (the next start resumes them).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.engine import Engine

import db
from compiler.backends import Target
from db.records import JobRecord
from db.session import session_scope
from service.jobs.heartbeat import Heartbeat
from service.jobs.runner import Outcome, WorkerIdentity, run_job_through_outages
from service.jobs.storage import open_storage

logger = logging.getLogger(__name__)

#: How many unfinished jobs a start looks at per status (more wait for a later restart or the API).
RESUME_LIMIT = 10_000


@dataclass
class _Lane:
    """One device's worker: its identity, target, waiting job ids and thread."""

    worker: WorkerIdentity
    target: Target
    waiting: queue.SimpleQueue[int | None] = field(default_factory=queue.SimpleQueue)
    pending: set[int] = field(default_factory=set)
    running: int | None = None
    thread: threading.Thread | None = None


class EmbeddedExecutor:
    """A :class:`~service.jobs.Dispatcher` that runs jobs in this process, one device at a time each."""

    def __init__(self, engine: Engine, storage_url: str, lanes: Sequence[tuple[WorkerIdentity, Target]], *,
                 heartbeat_s: float = 5.0) -> None:
        self._engine = engine
        self._storage_url = storage_url
        self._lanes = {worker.queue: _Lane(worker, target) for worker, target in lanes}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._heartbeat = Heartbeat(engine, self._current, heartbeat_s)

    @property
    def workers(self) -> list[WorkerIdentity]:
        return [lane.worker for lane in self._lanes.values()]

    def start(self, *, host: str, pid: int) -> None:
        """Register the workers, queue every unfinished job of their queues, start the threads."""
        with session_scope(self._engine) as session:
            for lane in self._lanes.values():
                w = lane.worker
                db.register_worker(session=session, name=w.name, target=w.target, queue=w.queue, device=w.device,
                                   toolchain=w.toolchain, host=host, pid=pid)
            unfinished = [job for status in ("running", "queued")
                          for job in db.list_jobs(session=session, status=status, limit=RESUME_LIMIT)]
        for job in sorted(unfinished, key=lambda j: (j.created_at, j.id)):
            self.enqueue(job)
        for lane in self._lanes.values():
            lane.thread = threading.Thread(target=self._run_lane, args=(lane,), name=f"warpmap-{lane.worker.target}",
                                           daemon=True)
            lane.thread.start()
        self._heartbeat.start()

    def enqueue(self, job: JobRecord) -> None:
        lane = self._lanes.get(job.queue)
        if lane is None:
            logger.warning("job %s is for queue %s, which no local device serves; it stays queued", job.id, job.queue)
            return
        with self._lock:
            if job.id in lane.pending or job.id == lane.running:
                return
            lane.pending.add(job.id)
        lane.waiting.put(job.id)

    def cancel(self, job_id: int) -> None:
        """Nothing to do here: a queued job is skipped when its turn comes (``start_job`` says it was
        cancelled) and a running one stops after its trial (the runner reads the status back)."""

    def stop(self, timeout_s: float | None = None) -> None:
        """End every running trial, release its job, mark the workers stopped."""
        self._stopping.set()
        for lane in self._lanes.values():
            lane.waiting.put(None)
        for lane in self._lanes.values():
            if lane.thread is not None:
                lane.thread.join(timeout_s)
        self._heartbeat.stop()
        with session_scope(self._engine) as session:
            for lane in self._lanes.values():
                db.stop_worker(session=session, name=lane.worker.name)

    def _current(self) -> dict[str, int | None]:
        with self._lock:
            return {lane.worker.name: lane.running for lane in self._lanes.values()}

    def _run_lane(self, lane: _Lane) -> None:
        storage = open_storage(self._storage_url)
        try:
            while not self._stopping.is_set():
                job_id = lane.waiting.get()
                if job_id is None:
                    break
                with self._lock:
                    lane.pending.discard(job_id)
                    lane.running = job_id
                try:
                    outcome = run_job_through_outages(job_id, engine=self._engine, storage=storage, worker=lane.worker,
                                      target=lane.target, stopping=self._stopping)
                    logger.info("job %s on %s: %s", job_id, lane.worker.name, outcome.value)
                    if outcome is Outcome.RELEASED:
                        break
                except Exception:  # the database went away mid-job: the next start resumes the job
                    logger.exception("job %s on %s could not be run", job_id, lane.worker.name)
                finally:
                    with self._lock:
                        lane.running = None
        finally:
            storage.engine.dispose()
