"""The session helper and its error translation, API keys, and versioned JSON, on both databases."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import Engine

from db import (
    ConflictError,
    DatabaseError,
    SchemaVersionError,
    TrialResult,
    UnavailableError,
    authenticate_api_key,
    create_api_key,
    create_engine_for,
    list_api_keys,
    record_trial,
    revoke_api_key,
    session_scope,
)
from db.models import ApiKey, Workload
from db.session import with_timeouts


def test_foreign_key_violation_becomes_conflict_error(engine: Engine) -> None:
    with pytest.raises(ConflictError, match="constraint"), session_scope(engine) as session:
        record_trial(session=session, job_id=424242, trial=TrialResult(number=0, params={}, status="ok"))


def _create_then_fail(engine: Engine) -> None:
    with session_scope(engine) as session:
        create_api_key(session=session, name="doomed", scopes=["read"])
        session.flush()
        raise RuntimeError("boom")


def test_failure_rolls_back_the_whole_block(engine: Engine) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        _create_then_fail(engine)
    with session_scope(engine) as session:
        assert session.execute(select(func.count(ApiKey.id))).scalar_one() == 0


def test_unreachable_database_is_unavailable_error(backend: str, tmp_path) -> None:
    # SQLite: a folder is not a database file; PostgreSQL: nothing listens on port 1.
    url = (
        f"sqlite:///{tmp_path}"
        if backend == "sqlite"
        else "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2"
    )
    engine = create_engine_for(url)
    try:
        with pytest.raises(UnavailableError, match="unavailable"), session_scope(engine) as session:
            session.execute(text("SELECT 1"))
    finally:
        engine.dispose()


def test_bad_url_is_a_clear_error() -> None:
    with pytest.raises(DatabaseError, match="'nonsense'"):
        create_engine_for("nonsense")
    with pytest.raises(DatabaseError, match="nosuchdialect"):
        create_engine_for("nosuchdialect://x")


def test_newer_json_schema_is_refused(engine: Engine) -> None:
    with session_scope(engine) as session:
        session.execute(
            text(
                "INSERT INTO wm_workloads (key, op, spec, spec_hash, created_at) VALUES ('op:1', 'op', :doc, 'h', :now)"
            ),
            {"doc": '{"schema": 7, "data": {"n": 1}}', "now": "2026-11-01 00:00:00"},
        )
    with pytest.raises(SchemaVersionError, match="version 7"), session_scope(engine) as session:
        session.execute(select(Workload)).scalars().all()


def test_api_keys_are_hashed_checked_and_revoked(engine: Engine) -> None:
    with session_scope(engine) as session:
        token, record = create_api_key(session=session, name="ci", scopes=["tune", "read", "tune"])
    assert record.scopes == ("read", "tune") and token.startswith(record.prefix)
    with session_scope(engine) as session:
        stored = session.execute(select(ApiKey.token_hash)).scalar_one()
        assert token not in stored and len(stored) == 64
        found = authenticate_api_key(session=session, token=token)
        assert found is not None and found.id == record.id and found.last_used_at is not None
        assert authenticate_api_key(session=session, token=token + "x") is None
        revoked = revoke_api_key(session=session, key_id=record.id)
        assert revoked.revoked_at is not None
        assert revoke_api_key(session=session, key_id=record.id).revoked_at == revoked.revoked_at
        assert authenticate_api_key(session=session, token=token) is None
        assert [k.name for k in list_api_keys(session=session)] == ["ci"]


@pytest.mark.postgres
def test_with_timeouts_stops_a_long_statement_on_postgresql(postgres_server: Any) -> None:  # conftest's PostgresServer
    url = with_timeouts(postgres_server.url(postgres_server.create_database()), connect_timeout_s=5,
                        statement_timeout_s=0.5)
    engine = create_engine_for(url)
    try:
        with pytest.raises(DatabaseError, match="statement timeout"), session_scope(engine) as session:
            session.execute(text("SELECT pg_sleep(5)"))
    finally:
        engine.dispose()
