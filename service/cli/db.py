"""``warpmap db upgrade | downgrade | current``: the database schema, through Alembic."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from sqlalchemy.engine import make_url

from db.errors import DatabaseError
from db.migrate import current_revision, downgrade, head_revision, upgrade
from service.cli.errors import CliError
from service.settings import Settings


def add_database_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="SQLAlchemy database URL (default: $WARPMAP_DATABASE_URL, else SQLite in the user data folder)",
    )


def database_url(args: argparse.Namespace) -> str:
    """The URL from ``--database-url``, else from the settings (environment, then the default)."""
    try:
        overrides: dict[str, Any] = {"database_url": args.database_url} if args.database_url else {}
        return Settings(**overrides).database_url
    except ValidationError as exc:
        raise CliError("; ".join(error["msg"] for error in exc.errors())) from exc


def shown(url: str) -> str:
    """``url`` with any password hidden, for messages."""
    return make_url(url).render_as_string(hide_password=True)


def describe_revision(revision: str | None) -> str:
    head = head_revision()
    if revision is None:
        return "empty (no warpmap tables; run `warpmap db upgrade`)"
    if revision == head:
        return f"{revision} (head)"
    return f"{revision} (behind head {head}; run `warpmap db upgrade`)"


def _migrate_and_show(args: argparse.Namespace, action: Callable[[str, str], None] | None) -> int:
    """Run ``action(url, revision)`` if given, then print where the database stands."""
    url = database_url(args)
    try:
        if action is not None:
            action(url, args.revision)
        print(f"{shown(url)}: {describe_revision(current_revision(url))}")
    except DatabaseError as exc:
        raise CliError(str(exc)) from exc
    return 0


def _upgrade(args: argparse.Namespace) -> int:
    return _migrate_and_show(args, upgrade)


def _downgrade(args: argparse.Namespace) -> int:
    return _migrate_and_show(args, downgrade)


def _current(args: argparse.Namespace) -> int:
    return _migrate_and_show(args, None)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("db", help="create or migrate the tuning database")
    commands = parser.add_subparsers(dest="db_command", required=True, metavar="ACTION")

    up = commands.add_parser("upgrade", help="migrate the schema up (to the newest revision by default)")
    up.add_argument("revision", nargs="?", default="head", help="target revision (default: head)")
    add_database_option(up)
    up.set_defaults(func=_upgrade)

    down = commands.add_parser("downgrade", help="migrate the schema down")
    down.add_argument("revision", help="target revision: an id, -1 for one step, or base for nothing")
    add_database_option(down)
    down.set_defaults(func=_downgrade)

    current = commands.add_parser("current", help="print the schema revision of the database")
    add_database_option(current)
    current.set_defaults(func=_current)
