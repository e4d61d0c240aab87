"""Arguments of ``warpmap keys create | ls | revoke``."""

from __future__ import annotations

from typing import Any

from service.cli.args.db import add_database_option

SCOPES = ("read", "tune", "admin")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("keys", help="create, list and revoke API keys of the service")
    commands = parser.add_subparsers(dest="keys_command", required=True, metavar="ACTION")

    create = commands.add_parser("create", help="create a key and print it (shown once: the last word of the output)")
    create.add_argument("--scope", required=True, choices=SCOPES,
                        help="read: look up kernels and jobs; tune: also submit and cancel tunings; admin: all")
    create.add_argument("--name", default="", help="a label for listings (default: the scope and the date)")
    create.add_argument("--max-trials", type=int, metavar="N", help="the most trials one request of this key may ask")
    create.add_argument("--max-seconds", type=float, metavar="S",
                        help="the longest tuning one request of this key may ask, in seconds")
    add_database_option(create)
    create.set_defaults(handler="service.cli.keys:create_command")

    ls = commands.add_parser("ls", help="list keys (never the keys themselves: their first characters)")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    add_database_option(ls)
    ls.set_defaults(handler="service.cli.keys:ls_command")

    revoke = commands.add_parser("revoke", help="revoke a key by id; a server stops accepting it within seconds")
    revoke.add_argument("key_id", type=int, metavar="ID", help="the key's id, as `warpmap keys ls` prints it")
    add_database_option(revoke)
    revoke.set_defaults(handler="service.cli.keys:revoke_command")
