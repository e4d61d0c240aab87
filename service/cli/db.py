"""``warpmap db upgrade | downgrade | current``: the database schema, through Alembic."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from sqlalchemy.engine import make_url

from db.errors import DatabaseError
from db.migrate import current_revision, downgrade, head_revision, upgrade
from db.session import with_timeouts
from service.cli.errors import CliError
from service.settings import Settings


def database_url(args: argparse.Namespace) -> str:
    """The URL from ``--database-url``, else from the settings (environment, then the default), with
    the settings' connect and statement timeouts added for PostgreSQL."""
    try:
        overrides: dict[str, Any] = {"database_url": args.database_url} if args.database_url else {}
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise CliError("; ".join(error["msg"] for error in exc.errors())) from exc
    statement_s = settings.database_statement_timeout_s
    try:
        return with_timeouts(settings.database_url, connect_timeout_s=settings.database_connect_timeout_s,
                             statement_timeout_s=statement_s or None)
    except DatabaseError as exc:
        raise CliError(str(exc)) from exc


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
        raise CliError(f"{shown(url)}: {exc}") from exc
    return 0


def confirm_downgrade(args: argparse.Namespace, url: str) -> None:
    """Ask before a downgrade drops tables and the rows in them; ``--yes`` skips the question.

    Without a terminal to ask on (a script, CI), refuse rather than guess.
    """
    if args.yes:
        return
    question = f"downgrading {shown(url)} to {args.revision!r} drops tables and the data in them"
    if not sys.stdin.isatty():
        raise CliError(f"{question}; pass --yes to confirm (standard input is not a terminal)")
    answer = input(f"{question}. Type 'yes' to go on: ")
    if answer.strip().lower() != "yes":
        raise CliError("downgrade cancelled; nothing was changed")


def upgrade_command(args: argparse.Namespace) -> int:
    return _migrate_and_show(args, upgrade)


def downgrade_command(args: argparse.Namespace) -> int:
    confirm_downgrade(args, database_url(args))
    return _migrate_and_show(args, downgrade)


def current_command(args: argparse.Namespace) -> int:
    return _migrate_and_show(args, None)
