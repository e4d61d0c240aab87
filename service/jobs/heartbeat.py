"""``wm_workers`` heartbeats: a thread that touches each of a process's workers every few seconds, so
the API sees them alive (``GET /v1/devices``, ``/readyz``) also while a long trial runs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sqlalchemy.engine import Engine

import db
from db.session import session_scope

logger = logging.getLogger(__name__)


class Heartbeat:
    """Touch every worker ``current()`` names with the job it runs, every ``interval_s`` seconds.

    A failed touch (the database restarting) is logged and tried again at the next beat.
    """

    def __init__(self, engine: Engine, current: Callable[[], dict[str, int | None]], interval_s: float) -> None:
        self._engine = engine
        self._current = current
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="warpmap-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def beat(self) -> None:
        with session_scope(self._engine) as session:
            for name, job_id in self._current().items():
                db.touch_worker(session=session, name=name, job_id=job_id)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.beat()
            except Exception as exc:  # the next beat tries again
                logger.warning("worker heartbeat failed: %s", exc)
