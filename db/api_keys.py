"""Keyword-only repository functions for API keys: random tokens, stored only as SHA-256 hashes.

A token is 32 random bytes, so a plain SHA-256 is enough (no password-style stretching needed):
guessing a token is as hard as guessing its hash preimage.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping
from datetime import datetime

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from db.columns import UTCDateTime
from db.errors import NotFoundError
from db.models import ApiKey, utcnow
from db.records import ApiKeyRecord

TOKEN_PREFIX = "wm_"
_SHOWN_CHARS = 10


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _record(row: ApiKey) -> ApiKeyRecord:
    return ApiKeyRecord(
        id=row.id,
        name=row.name,
        prefix=row.prefix,
        scopes=tuple(row.scopes),
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
        max_trials=row.max_trials,
        max_seconds=row.max_seconds,
    )


def create_api_key(
    *,
    session: Session,
    name: str,
    scopes: Iterable[str],
    max_trials: int | None = None,
    max_seconds: float | None = None,
) -> tuple[str, ApiKeyRecord]:
    """A new key; returns ``(token, record)``. The token is shown once and never stored.

    ``max_trials`` / ``max_seconds`` cap the budgets of the key's tuning requests (None: the service's).
    """
    if max_trials is not None and max_trials < 1:
        raise ValueError(f"max_trials must be at least 1, got {max_trials}")
    if max_seconds is not None and not max_seconds > 0:
        raise ValueError(f"max_seconds must be above 0, got {max_seconds}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(
        name=name,
        prefix=token[:_SHOWN_CHARS],
        token_hash=hash_token(token),
        scopes=sorted(set(scopes)),
        created_at=utcnow(),
        max_trials=max_trials,
        max_seconds=max_seconds,
    )
    session.add(row)
    session.flush()
    return token, _record(row)


def authenticate_api_key(*, session: Session, token: str, now: datetime | None = None) -> ApiKeyRecord | None:
    """The live key matching ``token`` (its last use recorded), or None for unknown or revoked tokens."""
    row = session.execute(
        select(ApiKey).where(ApiKey.token_hash == hash_token(token), ApiKey.revoked_at.is_(None))
    ).scalar_one_or_none()
    if row is None:
        return None
    row.last_used_at = now or utcnow()
    session.flush()
    return _record(row)


def find_api_key(*, session: Session, token: str) -> ApiKeyRecord | None:
    """The live key matching ``token``, or None; reads only (a server counts uses with :func:`touch_api_keys`)."""
    row = session.execute(
        select(ApiKey).where(ApiKey.token_hash == hash_token(token), ApiKey.revoked_at.is_(None))
    ).scalar_one_or_none()
    return None if row is None else _record(row)


def touch_api_keys(*, session: Session, used: Mapping[int, datetime]) -> None:
    """Record when each key (by id) was last used, in one batched statement; a later time never goes back."""
    if not used:
        return
    statement = (
        update(ApiKey)
        .where(ApiKey.id == bindparam("key_id"))
        .where((ApiKey.last_used_at.is_(None)) | (ApiKey.last_used_at < bindparam("used_at", type_=UTCDateTime())))
        .values(last_used_at=bindparam("used_at", type_=UTCDateTime()))
    )
    session.connection().execute(statement, [{"key_id": k, "used_at": t} for k, t in sorted(used.items())])


def list_api_keys(*, session: Session) -> list[ApiKeyRecord]:
    return [_record(row) for row in session.execute(select(ApiKey).order_by(ApiKey.id)).scalars()]


def revoke_api_key(*, session: Session, key_id: int, now: datetime | None = None) -> ApiKeyRecord:
    """Revoke a key; revoking twice keeps the first revocation time."""
    session.execute(
        update(ApiKey)
        .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=now or utcnow())
    )
    row = session.get(ApiKey, key_id, populate_existing=True)
    if row is None:
        raise NotFoundError(f"no API key with id {key_id}")
    return _record(row)
