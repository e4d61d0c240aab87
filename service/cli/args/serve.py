"""Arguments of ``warpmap serve``."""

from __future__ import annotations

from typing import Any

from service.cli.args.db import add_database_option


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the REST API (and, on SQLite, run the tuning jobs in this process)",
        description="Serve the tuning API over HTTP. With the default SQLite database the migrations are applied "
        "and one in-process executor per local device (the GPU, else the cpu) runs the jobs; unfinished jobs of an "
        "earlier run are resumed from their studies. On PostgreSQL the jobs go to `warpmap worker` processes.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="in-process executors (SQLite only; default: one per local device; 0: serve the API "
                        "alone, jobs wait for a service that runs them)")
    add_database_option(parser)
    parser.set_defaults(handler="service.cli.serve:run")
