"""Schema migrations from code: the service runs :func:`upgrade` at start, ``warpmap db`` wraps these.

The Alembic configuration is built here, not read from an ini file, so an installed package
migrates without a repository checkout.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.exc import SQLAlchemyError

import migrations
from db.errors import DatabaseError
from db.session import create_engine_for, parse_url, translate_error

#: Optuna keeps its own ``alembic_version`` table in the same database.
VERSION_TABLE = "wm_alembic_version"
#: ``__path__`` rather than ``__file__``: an editable install made before ``migrations/__init__.py``
#: existed maps the folder as a namespace package, which has no ``__file__``.
MIGRATIONS_DIR = Path(next(iter(migrations.__path__))).resolve()


def alembic_config(url: str) -> Config:
    """A configuration for ``url`` that leaves the application's logging alone."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["url"] = url
    config.attributes["configure_logger"] = False
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    if head is None:
        raise DatabaseError(f"no migrations found in {MIGRATIONS_DIR}")
    return head


def revisions() -> list[str]:
    """All revisions, oldest first."""
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


@contextmanager
def _sqlite_migration_lock(url: str) -> Iterator[None]:
    """Serialise migrations of one SQLite file across processes (PostgreSQL uses an advisory lock).

    An ``flock`` on the database's folder, held for the whole migration: several service processes
    starting together must not interleave their version checks and DDL. The folder rather than a
    lock file beside the database, which would be left behind (removing it after use would let a
    waiting process lock a file that is no longer the one others open), and rather than the
    database file itself, whose locks belong to SQLite.
    """
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        yield
        return
    folder = Path(parsed.database).expanduser().absolute().parent
    folder.mkdir(parents=True, exist_ok=True)
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # closing releases the lock


def _run(action: str, url: str, revision: str) -> None:
    try:
        with _sqlite_migration_lock(url):
            getattr(command, action)(alembic_config(url), revision)
    except CommandError as exc:
        raise DatabaseError(f"cannot {action} to {revision!r}: {exc}") from exc
    except SQLAlchemyError as exc:
        raise translate_error(exc) from exc


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the schema at ``url`` up to ``revision`` (default: the newest)."""
    _run("upgrade", url, revision)


def downgrade(url: str, revision: str) -> None:
    """Take the schema down to ``revision`` (``"-1"`` for one step, ``"base"`` for nothing)."""
    _run("downgrade", url, revision)


def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at; None for an empty database."""
    engine = create_engine_for(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
            return context.get_current_revision()
    except SQLAlchemyError as exc:
        raise translate_error(exc) from exc
    finally:
        engine.dispose()
