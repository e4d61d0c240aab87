"""Arguments of ``warpmap tunings ls | show | watch | cancel``."""

from __future__ import annotations

from typing import Any

from service.cli.args.db import add_database_option

#: The job statuses (``db.models.JOB_STATUSES``; a test keeps them equal without importing SQLAlchemy here).
STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("tunings", help="tunings, the CLI's and the service's: list, show, watch, cancel")
    commands = parser.add_subparsers(dest="tunings_command", required=True, metavar="ACTION")

    ls = commands.add_parser("ls", help="list tunings, newest first: status, trials, best so far")
    ls.add_argument("--status", choices=STATUSES, help="only tunings with this status")
    ls.add_argument("--op", help="only tunings of this operator, e.g. matmul")
    ls.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    add_database_option(ls)
    ls.set_defaults(handler="service.cli.tunings:ls_command")

    show = commands.add_parser("show", help="one tuning and its trials: status, latency, schedule, message")
    show.add_argument("tuning", type=int, help="tuning id, as printed by `warpmap tunings ls` (the API's job id)")
    show.add_argument("--sort", choices=("number", "latency"), default="number",
                      help="trials in the order they ran (default), or fastest first, failures last")
    show.add_argument("--limit", type=int,
                      help="at most this many trials, 0 for all (default: 50 in the table, all with --json)")
    show.add_argument("--json", action="store_true", help="the tuning and all its trials as one JSON object")
    add_database_option(show)
    show.set_defaults(handler="service.cli.tunings:show_command")

    watch = commands.add_parser("watch", help="follow a tuning's progress until it ends (exit 0 if it succeeded)")
    watch.add_argument("tuning", type=int, help="tuning id, as printed by `warpmap tunings ls`")
    watch.add_argument("--interval", type=float, default=1.0, help="seconds between reads of it (default 1)")
    add_database_option(watch)
    watch.set_defaults(handler="service.cli.tunings:watch_command")

    cancel = commands.add_parser("cancel", help="cancel a queued or running tuning; its measured trials stay")
    cancel.add_argument("tuning", type=int, help="tuning id, as printed by `warpmap tunings ls`")
    add_database_option(cancel)
    cancel.set_defaults(handler="service.cli.tunings:cancel_command")
