"""Alembic environment: run by Alembic, configured by :func:`db.migrate.alembic_config`.

The database comes from ``config.attributes["url"]`` (or ``sqlalchemy.url`` when run from the
``alembic`` command with ``migrations/alembic.ini``). Our version table is ``wm_alembic_version``
because Optuna keeps its own ``alembic_version`` in the same database.
"""

from __future__ import annotations

from logging.config import fileConfig
from typing import Any

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from db.migrate import VERSION_TABLE
from db.models import Base
from db.session import create_engine_for

config = context.config

# fileConfig would disable every logger the application already configured; only the stand-alone
# ``alembic`` command (which has an ini file and asks for it) gets it.
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _ours(name: str | None, type_: str, _parent: Any) -> bool:
    """Compare and migrate only warpmap's tables, never Optuna's."""
    return type_ != "table" or (name or "").startswith("wm_")


def _configure(**kwargs: Any) -> None:
    context.configure(
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        render_as_batch=True,
        include_name=_ours,
        compare_type=True,
        **kwargs,
    )


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL: set config.attributes['url'] or sqlalchemy.url")
    return str(url)


#: Any fixed number: the PostgreSQL advisory lock that serialises concurrent ``upgrade`` calls.
MIGRATION_LOCK_ID = 0x776D6D67


def _run(connection: Connection) -> None:
    _configure(connection=connection)
    with context.begin_transaction():
        # Several service processes may start together and all run the migrations. On PostgreSQL the
        # first takes this lock and the others wait, then find the schema current; on SQLite the
        # engine's BEGIN IMMEDIATE already serialises them.
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:lock)"), {"lock": MIGRATION_LOCK_ID})
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine_for(_url(), foreign_keys=False)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


def run_offline() -> None:
    _configure(url=_url(), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
