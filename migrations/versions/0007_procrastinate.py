"""procrastinate's queue tables, functions and triggers (PostgreSQL only: SQLite's jobs run in-process).

The schema is procrastinate's own, read from its installed package (``SchemaManager.get_schema``), not a
copy: the queue and the code that drives it come from one release. On SQLite this revision does nothing.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import re
from contextlib import closing

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_OBJECT = re.compile(r"^CREATE (TABLE|TYPE|FUNCTION)\s+(procrastinate_\w+)", re.MULTILINE)


def _schema() -> str:
    from procrastinate.schema import SchemaManager

    return SchemaManager.get_schema()


def _execute_raw(sql: str) -> None:
    # Straight to the driver: the script has no parameters, and SQLAlchemy's text() would read its
    # ``:name`` and ``%`` as placeholders.
    connection = op.get_bind().connection.dbapi_connection
    # None only once the pool has invalidated or detached it, never for the migration's open connection.
    assert connection is not None
    # closing(): DB-API cursors need not be context managers (psycopg's __exit__ only closes it).
    with closing(connection.cursor()) as cursor:
        cursor.execute(sql)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    exists = bind.exec_driver_sql("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").scalar()
    if not exists:  # a database whose operator applied procrastinate's schema already keeps it
        _execute_raw(_schema())


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    kinds: dict[str, list[str]] = {"TABLE": [], "TYPE": [], "FUNCTION": []}
    for kind, name in _OBJECT.findall(_schema()):
        kinds[kind].append(name)
    # Tables first (their triggers go with them), then the functions and types they used.
    statements = [f"DROP TABLE IF EXISTS {', '.join(kinds['TABLE'])} CASCADE"]
    statements += [f"DROP FUNCTION IF EXISTS {name} CASCADE" for name in dict.fromkeys(kinds["FUNCTION"])]
    statements += [f"DROP TYPE IF EXISTS {', '.join(kinds['TYPE'])} CASCADE"]
    _execute_raw(";\n".join(statements))
