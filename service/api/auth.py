"""API keys on requests: ``Authorization: Bearer <key>``, scopes ``read`` < ``tune`` < ``admin``.

A key is looked up by the SHA-256 of the token (``db.api_keys``), read-only, and the answer reused for
``api_key_cache_s`` seconds, so a busy client costs one query per few seconds; a revoked key stops
working within that time. Its use is counted in memory and written with the cache hits.
401 means no usable key (missing, malformed, unknown, revoked), 403 a key without the scope; the
body says which.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from db.api_keys import find_api_key, hash_token
from db.models import utcnow
from db.records import ApiKeyRecord
from service.api.state import ApiState

Scope = Literal["read", "tune", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "tune", "admin")
# Keyed by str: a stored key's scopes are whatever its row holds, and an unknown one ranks below every scope.
_RANK: dict[str, int] = {scope: rank for rank, scope in enumerate(SCOPES)}

bearer = HTTPBearer(auto_error=False, description="an API key from `warpmap keys create`")


async def api_state(request: Request) -> ApiState:
    return request.app.state.api


def allows(scopes: tuple[str, ...], needed: Scope) -> bool:
    """Whether a key with ``scopes`` may do what ``needed`` allows (a higher scope implies the lower).

    >>> allows(("tune",), "read"), allows(("read",), "tune"), allows(("admin",), "tune")
    (True, False, True)
    """
    return any(_RANK.get(scope, -1) >= _RANK[needed] for scope in scopes)


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})


async def _key_for(state: ApiState, token: str) -> ApiKeyRecord | None:
    async def load() -> ApiKeyRecord | None:
        return await state.read(find_api_key, token=token)

    return await state.keys.fetch(hash_token(token), load)


def require(needed: Scope) -> Callable[..., Awaitable[ApiKeyRecord | None]]:
    """A dependency: the request's key, which must allow ``needed``; None for an open read without a key."""

    async def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
        state: Annotated[ApiState, Depends(api_state)],
    ) -> ApiKeyRecord | None:
        if credentials is None:
            if needed == "read" and state.settings.api_open_reads:
                return None
            if "authorization" in request.headers:
                raise _unauthorized("the Authorization header is not 'Bearer <key>'")
            raise _unauthorized(f"this endpoint needs an API key with the {needed!r} scope: send "
                                "'Authorization: Bearer <key>' (create one with `warpmap keys create`)")
        key = await _key_for(state, credentials.credentials)
        if key is None:
            raise _unauthorized("unknown or revoked API key")
        if not allows(key.scopes, needed):
            have = ", ".join(key.scopes) or "none"
            raise HTTPException(403, f"API key {key.prefix}... (scopes: {have}) lacks the {needed!r} scope "
                                     f"that {request.method} {request.url.path} needs")
        state.key_used(key, utcnow())
        return key

    return dependency


#: Route parameters: the app's state, and the key a route needs (None for an open read).
State = Annotated[ApiState, Depends(api_state)]
ReadKey = Annotated[ApiKeyRecord | None, Depends(require("read"))]
TuneKey = Annotated[ApiKeyRecord | None, Depends(require("tune"))]
