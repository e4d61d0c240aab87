"""Request limits: the body size (413, before the body is read whole), spec bounds and budgets (422).

A 422 raised here has FastAPI's shape, ``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``, with
``loc`` naming the offending field, like the errors of the request models themselves.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from compiler.ops import get_operator
from db.records import ApiKeyRecord
from service.api.schemas import BudgetRequest
from service.settings import Settings

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def invalid(loc: tuple[str | int, ...], message: str, kind: str = "value_error") -> RequestValidationError:
    """A 422 naming the field at ``loc`` (``("body", "budget", "trials")``)."""
    return RequestValidationError([{"loc": loc, "msg": message, "type": kind}])


def _query_names(dependant: Any) -> set[str]:
    """The query parameters a route takes, its dependencies' included."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def known_query(request: Request) -> None:
    """A dependency: a query parameter the route does not take is a 422 naming it, not silently ignored
    (``?limt=5`` would otherwise read as the default page)."""
    if not request.query_params:
        return
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None:
        return
    allowed = _query_names(dependant)
    for name in request.query_params:
        if name not in allowed:
            takes = ", ".join(sorted(allowed)) or "none"
            raise invalid(("query", name), f"unknown query parameter {name!r}; this endpoint takes: {takes}",
                          "extra_forbidden")


def check_spec_bounds(spec: Any, settings: Settings) -> None:
    """The operator's tensors together must fit ``api_max_spec_bytes``."""
    size = int(get_operator(spec.op).min_bytes(spec))
    if size > settings.api_max_spec_bytes:
        raise invalid(("body", "operator"), f"this {spec.op} moves {size:,} bytes; this service tunes operators "
                                            f"of at most {settings.api_max_spec_bytes:,} bytes")


def bounded_budget(budget: BudgetRequest, key: ApiKeyRecord | None, settings: Settings) -> dict[str, Any]:
    """The budget a job gets: the request's, checked against the service's and the key's limits; a request
    without ``seconds`` gets the limit."""
    own_trials, own_seconds = (key.max_trials, key.max_seconds) if key is not None else (None, None)
    max_trials = min(settings.api_max_trials, own_trials or settings.api_max_trials)
    max_seconds = min(settings.api_max_seconds, own_seconds or settings.api_max_seconds)
    if budget.trials > max_trials:
        raise invalid(("body", "budget", "trials"), f"at most {max_trials} trials are allowed for this key, "
                                                   f"got {budget.trials}", "less_than_equal")
    if budget.seconds is not None and budget.seconds > max_seconds:
        raise invalid(("body", "budget", "seconds"), f"at most {max_seconds:g} seconds are allowed for this key, "
                                                    f"got {budget.seconds:g}", "less_than_equal")
    if budget.patience is not None and budget.patience > budget.trials:
        raise invalid(("body", "budget", "patience"), f"patience {budget.patience} exceeds the {budget.trials} "
                                                     "trials of the budget")
    seconds = budget.seconds if budget.seconds is not None else max_seconds
    return {"trials": budget.trials, "seconds": seconds, "patience": budget.patience}


class BodySizeLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413, whether or not it declared its length."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        payload = json.dumps({"detail": f"the request body is over the limit of {self.limit:,} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": payload})
