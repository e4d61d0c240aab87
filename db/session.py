"""Engines and the one session helper: commit on success, roll back on failure, translate errors.

>>> engine = create_engine_for("sqlite://")
>>> with session_scope(engine) as session:
...     session.execute(text("SELECT 1")).scalar_one()
1
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import InterfaceError as SAInterfaceError
from sqlalchemy.orm import Session

from db.errors import ConflictError, DatabaseError, UnavailableError

__all__ = ["create_engine_for", "parse_url", "session_scope", "text", "translate_error", "with_timeouts"]


def parse_url(url: str) -> URL:
    """A database URL, or a :class:`DatabaseError` naming the bad value."""
    try:
        return make_url(url)
    except ArgumentError as exc:
        raise DatabaseError(f"invalid database URL {url!r}: {exc}") from exc


def with_timeouts(url: str, *, connect_timeout_s: float, statement_timeout_s: float | None) -> str:
    """A PostgreSQL ``url`` with libpq's ``connect_timeout`` and a server ``statement_timeout`` added.

    Without them a server that accepts connections and never answers hangs every caller forever.
    Values already in the URL win; other databases are returned unchanged.

    >>> with_timeouts("postgresql+psycopg://u@h/db", connect_timeout_s=2.5, statement_timeout_s=60)
    'postgresql+psycopg://u@h/db?connect_timeout=3&options=-c+statement_timeout%3D60000'
    >>> with_timeouts("sqlite:///x.db", connect_timeout_s=2, statement_timeout_s=None)
    'sqlite:///x.db'
    """
    parsed = parse_url(url)
    if parsed.get_backend_name() != "postgresql":
        return url
    query = dict(parsed.query)
    query.setdefault("connect_timeout", str(max(1, math.ceil(connect_timeout_s))))
    if statement_timeout_s is not None:
        query.setdefault("options", f"-c statement_timeout={round(statement_timeout_s * 1000)}")
    return parsed.set(query=query).render_as_string(hide_password=False)


def _enable_wal(cursor: Any, busy_timeout_s: float) -> None:
    """Switch the file to WAL (a persistent setting), retrying while another connection holds it.

    Changing the journal mode needs an exclusive lock, and SQLite answers "database is locked" at
    once instead of waiting out the busy timeout, so processes opening a new file together collide.
    """
    deadline = time.monotonic() + busy_timeout_s
    delay = 0.005
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _configure_sqlite(engine: Engine, busy_timeout_s: float, foreign_keys: bool, read_only: bool = False) -> None:
    """WAL, a busy timeout, foreign keys, and write locks taken when a transaction begins.

    ``BEGIN IMMEDIATE`` matters for concurrent writers: a deferred transaction that reads first and
    writes later can fail at once with "database is locked" when another writer got in between,
    whatever the busy timeout; taking the write lock up front makes writers queue instead.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        cursor.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
        if read_only:
            cursor.execute("PRAGMA query_only = ON")
        if engine.url.database not in (None, "", ":memory:"):
            _enable_wal(cursor, busy_timeout_s)
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # A reader's deferred BEGIN takes no write lock: in WAL mode it reads beside any writer.
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def create_engine_for(
    url: str, *, echo: bool = False, busy_timeout_s: float = 30.0, foreign_keys: bool = True, read_only: bool = False
) -> Engine:
    """An engine for ``url``; a SQLite file's folder is created if missing.

    ``foreign_keys=False`` is for migrations only: SQLite batch mode copies and drops tables, and
    dropping a parent table with enforcement on would cascade deletes into its children.
    ``read_only=True`` (SQLite) opens transactions without taking the write lock and refuses writes, for
    a server's read path: many readers then never queue behind each other or a writer.
    """
    parsed = parse_url(url)
    try:
        if parsed.get_backend_name() == "sqlite":
            database = parsed.database
            if database and database != ":memory:" and not database.startswith("file:"):
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(parsed, echo=echo, connect_args={"timeout": busy_timeout_s})
            _configure_sqlite(engine, busy_timeout_s, foreign_keys, read_only)
            return engine
        return create_engine(parsed, echo=echo, pool_pre_ping=True)
    except (ArgumentError, ImportError) as exc:
        raise DatabaseError(f"cannot use database URL {parsed.render_as_string()!r}: {exc}") from exc


def translate_error(exc: SQLAlchemyError) -> DatabaseError:
    """Our exception for a SQLAlchemy one; the driver's message is kept, the SQL statement is not."""
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    if isinstance(exc, IntegrityError):
        return ConflictError(f"constraint violated: {detail}")
    if isinstance(exc, OperationalError | SAInterfaceError):
        return UnavailableError(f"database unavailable: {detail}")
    return DatabaseError(f"database error: {detail}")


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits when the block ends, rolls back if it raises.

    SQLAlchemy errors (including those raised while committing) become :mod:`db.errors` exceptions;
    any other exception rolls back and propagates unchanged. Objects stay readable after the block.
    """
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
        session.commit()
    except SQLAlchemyError as exc:
        session.rollback()
        raise translate_error(exc) from exc
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
