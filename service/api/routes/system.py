"""``/v1/devices`` (the workers and their devices), ``/healthz``, ``/readyz`` and ``/metrics``.

``/healthz`` answers while the process runs. ``/readyz`` is 200 only when the database answers, its
schema is at the newest migration, and every advertised target (``api_targets``, else each target a
registered worker serves) has a live worker; a 503 names the failing checks.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text

from db import list_workers
from db.migrate import current_revision, head_revision
from db.session import session_scope
from service.api import convert, schemas
from service.api.auth import ReadKey, State
from service.api.errors import documented
from service.api.limits import known_query
from service.api.state import ApiState
from service.api.targets import serves

router = APIRouter()


@router.get("/v1/devices", response_model=schemas.WorkerList, responses=documented(401, 403), tags=["devices"],
            dependencies=[Depends(known_query)],
            summary="Every registered worker's device, alive or not")
async def devices(_: ReadKey, state: State) -> schemas.WorkerList:
    workers = await state.read(list_workers, alive_within_s=state.settings.api_worker_alive_s)
    return schemas.WorkerList(items=[convert.worker(w) for w in workers])


@router.get("/healthz", response_model=schemas.Health, tags=["operations"], summary="The process is up")
async def healthz() -> schemas.Health:
    return schemas.Health(status="ok")


def readiness_checks(state: ApiState) -> dict[str, str]:
    """Each check's verdict, ``ok`` or what is wrong (blocking: run in the thread pool)."""
    checks: dict[str, str] = {}
    try:
        with state.reader.connect() as connection:
            connection.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unreachable: {str(exc).splitlines()[0]}"
        return {**checks, "migrations": "unknown", "workers": "unknown"}
    try:
        current, head = current_revision(state.url), head_revision()
        checks["migrations"] = "ok" if current == head else f"at {current}, head is {head}: run `warpmap db upgrade`"
    except Exception as exc:
        checks["migrations"] = f"unknown: {str(exc).splitlines()[0]}"
    try:
        with session_scope(state.reader) as session:
            workers = list_workers(session=session, alive_within_s=state.settings.api_worker_alive_s)
        checks["workers"] = _worker_check(workers, state.settings.api_targets)
    except Exception as exc:
        checks["workers"] = f"unknown: {str(exc).splitlines()[0]}"
    return checks


def _worker_check(workers: list[Any], advertised: tuple[str, ...]) -> str:
    registered = [w for w in workers if w.stopped_at is None]
    targets = advertised or tuple(sorted({w.target for w in registered}))
    if not targets:
        return "no worker is registered"
    missing = [t for t in targets if not any(w.alive and serves(t, w.target) for w in registered)]
    return "ok" if not missing else f"no live worker for {', '.join(missing)}"


@router.get("/readyz", response_model=schemas.Readiness, tags=["operations"],
            responses={503: {"model": schemas.Readiness, "description": "a check failed"}},
            summary="Database reachable, migrations at head, a live worker per target")
async def readyz(state: State) -> Any:
    checks = await state.call(readiness_checks, state)
    ready = all(verdict == "ok" for verdict in checks.values())
    body = schemas.Readiness(status="ready" if ready else "unready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get("/metrics", tags=["operations"], response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"},
                       **documented()},
            summary="Prometheus metrics")
async def metrics(state: State) -> Response:
    return Response(await state.call(state.metrics.render), media_type=CONTENT_TYPE_LATEST)
