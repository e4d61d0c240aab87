"""What one app instance holds: its engines, its dispatcher, and the small in-memory tables of the read path.

Every database call runs in Starlette's thread pool (:meth:`ApiState.read`, :meth:`ApiState.write`), so
a slow query never blocks the event loop. Reads go through their own engine: on SQLite it opens
deferred, read-only transactions, which never queue behind a writer in WAL mode. The read path
writes nothing: cache hits and API key uses are counted here and written in batches by the app's
background task (:meth:`ApiState.flush`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from db.api_keys import touch_api_keys
from db.records import ApiKeyRecord, CacheHit, DeviceInfo, JobRecord, ToolchainInfo, WorkloadSpec
from db.repository import add_kernel_hits, lookup_kernel
from db.session import session_scope
from service.settings import Settings

T = TypeVar("T")
log = logging.getLogger("warpmap.api")

#: Entries the key table keeps before it drops expired ones (a client guessing tokens must not grow it).
KEY_TABLE_LIMIT = 4096


class Dispatcher(Protocol):
    """How the API hands jobs to the job engine (CONTRACT section 3)."""

    def enqueue(self, job: JobRecord) -> None: ...

    def cancel(self, job_id: int) -> None: ...


@dataclass
class UseCounter:
    """Cache hits per kernel id and the last use of each API key, since the last flush."""

    hits: dict[int, int] = field(default_factory=dict)
    key_uses: dict[int, datetime] = field(default_factory=dict)

    def hit(self, kernel_id: int) -> None:
        self.hits[kernel_id] = self.hits.get(kernel_id, 0) + 1

    def key_used(self, key_id: int, at: datetime) -> None:
        self.key_uses[key_id] = at

    def take(self) -> UseCounter:
        """What was counted, leaving this counter empty (called on the event loop: no lock needed)."""
        taken = UseCounter(self.hits, self.key_uses)
        self.hits, self.key_uses = {}, {}
        return taken

    def give_back(self, taken: UseCounter) -> None:
        """Counts a failed flush could not write, kept for the next one."""
        for kernel_id, n in taken.hits.items():
            self.hits[kernel_id] = self.hits.get(kernel_id, 0) + n
        for key_id, at in taken.key_uses.items():
            self.key_uses[key_id] = max(at, self.key_uses.get(key_id, at))


@dataclass
class TimedTable:
    """Values kept for ``ttl_s`` seconds (monotonic clock), at most ``limit`` of them.

    :meth:`fetch` loads a missing or expired value once however many requests ask at the same moment:
    when an entry expires under load, one request reloads it while the others are answered with the
    value that just expired (for as long as the one query takes), so an expiry never sends every
    waiting request to the database at once (which showed as the p99 of the load bench).
    """

    ttl_s: float
    limit: int = KEY_TABLE_LIMIT
    entries: dict[str, tuple[float, Any]] = field(default_factory=dict)
    loading: dict[str, asyncio.Future[Any]] = field(default_factory=dict)

    def get(self, key: str) -> tuple[bool, Any]:
        found = self.entries.get(key)
        if found is None or found[0] < time.monotonic():
            return False, None
        return True, found[1]

    def put(self, key: str, value: Any) -> None:
        if self.ttl_s <= 0:
            return
        now = time.monotonic()
        if len(self.entries) >= self.limit:
            self.entries = {k: v for k, v in self.entries.items() if v[0] >= now}
            if len(self.entries) >= self.limit:
                self.entries.clear()
        self.entries[key] = (now + self.ttl_s, value)

    async def fetch(self, key: str, load: Callable[[], Awaitable[Any]],
                    keep: Callable[[Any], bool] = lambda value: True) -> Any:
        """The value for ``key``: remembered, or loaded by one ``load()`` shared by every concurrent caller.
        A loaded value is remembered only when ``keep(value)``; one that is not drops the old entry. With no
        time to live every call loads."""
        if self.ttl_s <= 0:
            return await load()
        found = self.entries.get(key)
        if found is not None and found[0] >= time.monotonic():
            return found[1]
        pending = self.loading.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._load(key, load, keep))
            # Retrieved here, so a failed reload that only stale readers saw is not reported as unretrieved.
            pending.add_done_callback(lambda done: done.cancelled() or done.exception())
            self.loading[key] = pending
        if found is not None:
            return found[1]
        return await asyncio.shield(pending)

    async def _load(self, key: str, load: Callable[[], Awaitable[Any]], keep: Callable[[Any], bool]) -> Any:
        try:
            value = await load()
            if keep(value):
                self.put(key, value)
            else:
                self.entries.pop(key, None)
            return value
        finally:
            self.loading.pop(key, None)


@dataclass
class ApiState:
    settings: Settings
    url: str
    engine: Engine
    reader: Engine
    dispatcher: Dispatcher
    uses: UseCounter = field(default_factory=UseCounter)
    keys: TimedTable = field(default_factory=lambda: TimedTable(0.0))
    workers: TimedTable = field(default_factory=lambda: TimedTable(0.0))
    #: Recent cache hits by lookup key (see :meth:`cached_lookup`).
    kernels: TimedTable = field(default_factory=lambda: TimedTable(0.0))
    #: Set by the app factory: the Prometheus metrics of this app (service.api.metrics.ApiMetrics).
    metrics: Any = None

    async def read(self, function: Callable[..., T], /, **kwargs: Any) -> T:
        """``function(session=..., **kwargs)`` in a read-only transaction, in the thread pool."""
        return await run_in_threadpool(_in_session, self.reader, function, kwargs)

    async def write(self, function: Callable[..., T], /, **kwargs: Any) -> T:
        """``function(session=..., **kwargs)`` in a transaction that commits, in the thread pool."""
        return await run_in_threadpool(_in_session, self.engine, function, kwargs)

    async def call(self, function: Callable[..., T], /, *args: Any) -> T:
        """Any blocking call (the dispatcher's), in the thread pool."""
        return await run_in_threadpool(function, *args)

    async def cached_lookup(
        self, workload: WorkloadSpec, device: DeviceInfo, toolchain: ToolchainInfo, nearest: bool = False
    ) -> CacheHit | None:
        """The cache's answer for the key, a hit counted (in memory) for the kernel it names.

        A hit is remembered for ``api_hit_cache_s`` seconds, so the hottest kernels cost neither a query
        nor a trip to the thread pool; a miss is never remembered (a kernel a worker just saved is seen
        at once).
        """
        memo = f"{workload.key}|{device.key}|{toolchain.key}|{nearest}"

        async def load() -> CacheHit | None:
            return await self.read(lookup_kernel, workload=workload, device=device, toolchain=toolchain,
                                   nearest=nearest, record_hit=False)

        hit = await self.kernels.fetch(memo, load, keep=lambda found: found is not None)
        if hit is not None:
            self.uses.hit(hit.kernel.id)
        return hit

    def key_used(self, key: ApiKeyRecord, at: datetime) -> None:
        self.uses.key_used(key.id, at)

    async def flush(self) -> None:
        """Write the counted hits and key uses in one transaction; on failure keep them for the next try."""
        taken = self.uses.take()
        if not taken.hits and not taken.key_uses:
            return
        try:
            await self.write(_write_uses, taken=taken)
        except Exception:  # the database may be restarting: the counts wait for the next flush
            log.warning("could not write %d kernel hit counts; retrying later", len(taken.hits), exc_info=True)
            self.uses.give_back(taken)


def _in_session(engine: Engine, function: Callable[..., T], kwargs: dict[str, Any]) -> T:
    with session_scope(engine) as session:
        return function(session=session, **kwargs)


def _write_uses(*, session: Session, taken: UseCounter) -> None:
    add_kernel_hits(session=session, hits=taken.hits)
    touch_api_keys(session=session, used=taken.key_uses)
