"""Errors as responses: ``{"detail": "..."}`` with the status that says what happened.

Database errors map to statuses here, once: an unknown id is 404, a conflicting change 409, a
database that cannot be reached 503 (with ``Retry-After``). Each route documents the statuses it can
answer with :func:`documented`, so the OpenAPI schema lists every one (schemathesis checks it).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from db.errors import ConflictError, DatabaseError, NotFoundError, UnavailableError
from service.api.schemas import ErrorBody

log = logging.getLogger("warpmap.api")

_DESCRIPTIONS = {
    400: "the body is not JSON",
    401: "no API key, or an unknown or revoked one (the detail says which)",
    403: "the API key lacks the scope this endpoint needs",
    404: "no such tuning or kernel",
    409: "the tuning already ended",
    413: "the request body is over the service's limit",
    415: "the body was not sent as JSON (Content-Type: application/json)",
    503: "the database is unavailable; retry later",
}


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route answering with ``statuses`` (and 503) besides its own."""
    return {status: {"model": ErrorBody, "description": _DESCRIPTIONS[status]} for status in (*statuses, 503)}


def _answer(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Register the database error handlers on ``app``."""

    async def not_found(_: Request, exc: Exception) -> JSONResponse:
        return _answer(404, str(exc))

    async def conflict(_: Request, exc: Exception) -> JSONResponse:
        return _answer(409, str(exc))

    async def unavailable(_: Request, exc: Exception) -> JSONResponse:
        return _answer(503, str(exc), {"Retry-After": "5"})

    async def database(_: Request, exc: Exception) -> JSONResponse:
        # Not the driver's text: it may quote the statement. The log has the whole error.
        log.error("database error", exc_info=exc)
        return _answer(500, "database error; see the service log")

    async def validation(request: Request, exc: Exception) -> JSONResponse:
        # `curl -d '{...}'` sends a form: FastAPI then sees a string where an object should be, and its 422
        # ("Input should be a valid dictionary") hides that one header is all that is missing.
        assert isinstance(exc, RequestValidationError)
        media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        json_sent = media == "application/json" or media.endswith("+json")
        if not json_sent and any(tuple(error.get("loc", ())) == ("body",) for error in exc.errors()):
            got = media or "no type"
            return _answer(415, f"send the body as JSON, with Content-Type: application/json (got {got})")
        return await request_validation_exception_handler(request, exc)

    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(NotFoundError, not_found)
    app.add_exception_handler(ConflictError, conflict)
    app.add_exception_handler(UnavailableError, unavailable)
    app.add_exception_handler(DatabaseError, database)
