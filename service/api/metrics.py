"""Prometheus metrics (the official client), one registry per app: nothing is module-global.

- ``warpmap_jobs{status}``: jobs by status, read from the database at each scrape.
- ``warpmap_trials_total{status}``: trials measured, by status, from the database (a counter:
  ``rate(warpmap_trials_total[1m])`` is trials per second by status).
- ``warpmap_workers{target, alive}``: registered workers.
- ``warpmap_cache_hits_total`` / ``warpmap_cache_misses_total{endpoint}``: lookups this process served.
- ``warpmap_http_request_duration_seconds{method, route, status}``: request latency, by route template.

The database collectors use the read engine and are called by :func:`render`, which the app runs in
the thread pool. Under several server processes the in-process counters are per process (a scrape
sees one of them); the database-backed families are the same whichever process answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from db.models import JOB_STATUSES, TRIAL_STATUSES
from db.repository import count_jobs_by_status, count_trials_by_status
from db.session import session_scope

#: Latency buckets in seconds: a cache hit should sit in the lowest few.
#: Methods named in labels; any other is counted as "other", so clients cannot invent label values.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class DatabaseCollector(Collector):
    """Jobs and trials by status, and workers, counted by the database when Prometheus scrapes."""

    def __init__(self, engine: Engine, workers: Callable[[Any], list[Any]]) -> None:
        self.engine = engine
        self.workers = workers

    def describe(self) -> list[Metric]:
        return []  # no describe-time query: registering must not touch the database

    def collect(self) -> Iterator[Metric]:
        with session_scope(self.engine) as session:
            jobs = count_jobs_by_status(session=session)
            trials = count_trials_by_status(session=session)
            workers = self.workers(session)
        job_family = GaugeMetricFamily("warpmap_jobs", "Tuning jobs by status", labels=["status"])
        for status in JOB_STATUSES:
            job_family.add_metric([status], jobs.get(status, 0))
        yield job_family
        trial_family = CounterMetricFamily("warpmap_trials", "Trials measured, by status", labels=["status"])
        for status in TRIAL_STATUSES:
            trial_family.add_metric([status], trials.get(status, 0))
        yield trial_family
        worker_family = GaugeMetricFamily("warpmap_workers", "Registered workers", labels=["target", "alive"])
        seen: dict[tuple[str, str], int] = {}
        for worker in workers:
            label = (worker.target, "true" if worker.alive else "false")
            seen[label] = seen.get(label, 0) + 1
        for label, n in sorted(seen.items()):
            worker_family.add_metric(list(label), n)
        yield worker_family


class ApiMetrics:
    """The app's registry and the metrics the request path updates."""

    def __init__(self, engine: Engine, workers: Callable[[Any], list[Any]]) -> None:
        self.registry = CollectorRegistry()
        self.hits = Counter("warpmap_cache_hits", "Cache lookups answered with a kernel", ["endpoint"],
                            registry=self.registry)
        self.misses = Counter("warpmap_cache_misses", "Cache lookups that found no kernel", ["endpoint"],
                              registry=self.registry)
        self.latency = Histogram("warpmap_http_request_duration_seconds", "HTTP request latency",
                                 ["method", "route", "status"], buckets=BUCKETS, registry=self.registry)
        self.registry.register(DatabaseCollector(engine, workers))

    def render(self) -> bytes:
        """The exposition text (blocking: queries the database)."""
        return generate_latest(self.registry)


class LatencyMiddleware:
    """ASGI middleware: every HTTP request's duration, labelled by the route template that served it."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            # The template (/v1/tunings/{job_id}), never the raw path: ids must not become label values.
            path = getattr(route, "path", None) or "unmatched"
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.metrics.latency.labels(method, path, str(status)).observe(time.perf_counter() - start)
