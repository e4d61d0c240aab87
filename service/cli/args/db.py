"""Arguments of ``warpmap db upgrade | downgrade | current``."""

from __future__ import annotations

import argparse
from typing import Any


def add_database_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="SQLAlchemy database URL (default: $WARPMAP_DATABASE_URL, else SQLite in the user data folder)",
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("db", help="create or migrate the tuning database")
    commands = parser.add_subparsers(dest="db_command", required=True, metavar="ACTION")

    up = commands.add_parser("upgrade", help="migrate the schema up (to the newest revision by default)")
    up.add_argument("revision", nargs="?", default="head", help="target revision (default: head)")
    add_database_option(up)
    up.set_defaults(handler="service.cli.db:upgrade_command")

    down = commands.add_parser("downgrade", help="migrate the schema down (asks first: this drops data)")
    down.add_argument("revision", help="target revision: an id, -1 for one step, or base for nothing")
    down.add_argument("--yes", action="store_true", help="do not ask; needed when standard input is not a terminal")
    add_database_option(down)
    down.set_defaults(handler="service.cli.db:downgrade_command")

    current = commands.add_parser("current", help="print the schema revision of the database")
    add_database_option(current)
    current.set_defaults(handler="service.cli.db:current_command")
