"""The app factory: ``create_app(settings=None, *, dispatcher=None)`` builds one self-contained FastAPI app.

Everything the app holds (engines, dispatcher, counters, caches, metrics registry) hangs off
``app.state.api``; nothing is module-global, so tests build as many apps as they like. The lifespan
applies migrations when ``migrate_on_start`` is set, runs the task that writes counted cache hits and
key uses every ``api_flush_s`` seconds, and on shutdown writes the last batch and closes the engines.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool

from db import list_workers
from db.migrate import upgrade
from db.session import create_engine_for, with_timeouts
from service.api import errors
from service.api.limits import BodySizeLimit
from service.api.metrics import ApiMetrics, LatencyMiddleware
from service.api.routes import kernels, system, tunings
from service.api.state import ApiState, Dispatcher, TimedTable
from service.settings import Settings

DESCRIPTION = """\
Give an operator spec and a target; get the best kernel for it, from the cache or by tuning.

Every `/v1` endpoint takes `Authorization: Bearer <key>` (keys come from `warpmap keys create --scope
read|tune|admin`); reads may be opened by the service's configuration, writes never.
"""


def _database_url(settings: Settings) -> str:
    statement_s = settings.database_statement_timeout_s
    return with_timeouts(settings.database_url, connect_timeout_s=settings.database_connect_timeout_s,
                         statement_timeout_s=statement_s or None)


def _default_dispatcher(settings: Settings) -> Dispatcher:
    # The job engine's package (service.jobs) pulls in the queue's client; only a served app needs it.
    from service.jobs import dispatcher_for

    return dispatcher_for(settings)


def create_app(settings: Settings | None = None, *, dispatcher: Dispatcher | None = None) -> FastAPI:
    """The API for ``settings`` (default: from the environment), handing jobs to ``dispatcher``."""
    settings = settings or Settings()
    url = _database_url(settings)
    engine = create_engine_for(url, echo=settings.database_echo, busy_timeout_s=settings.sqlite_busy_timeout_s)
    reader = engine if url.startswith("postgresql") else create_engine_for(
        url, echo=settings.database_echo, busy_timeout_s=settings.sqlite_busy_timeout_s, read_only=True)
    state = ApiState(
        settings=settings, url=url, engine=engine, reader=reader,
        dispatcher=dispatcher if dispatcher is not None else _default_dispatcher(settings),
        keys=TimedTable(settings.api_key_cache_s), workers=TimedTable(settings.api_worker_cache_s),
        kernels=TimedTable(settings.api_hit_cache_s),
    )
    state.metrics = ApiMetrics(reader, lambda session: list_workers(
        session=session, alive_within_s=settings.api_worker_alive_s))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.migrate_on_start:
            await run_in_threadpool(upgrade, url)
        flusher = asyncio.create_task(_flush_every(state, settings.api_flush_s))
        try:
            yield
        finally:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            await state.flush()
            engine.dispose()
            if reader is not engine:
                reader.dispose()

    # The documentation pages load Swagger UI and ReDoc from the app (under /static-offline-docs), not
    # from a CDN that a cluster's network may not reach.
    app = FastAPIOffline(title="warpmap", version="1", description=DESCRIPTION, lifespan=lifespan)
    app.state.api = state
    errors.install(app)
    for module in (tunings, kernels, system):
        app.include_router(module.router)
    # Outermost last: latency covers the size check too.
    app.add_middleware(BodySizeLimit, limit=settings.api_max_body_bytes)
    app.add_middleware(LatencyMiddleware, metrics=state.metrics)
    return app


async def _flush_every(state: ApiState, seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        await state.flush()
