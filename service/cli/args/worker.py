"""Arguments of ``warpmap worker``."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "worker",
        help="run tuning jobs on one device of this host (cluster mode, PostgreSQL)",
        description="Take tuning jobs from the queue of this device's kind and run them, one at a time, until "
        "SIGTERM or SIGINT (the running trial then ends and its job goes back to the queue). Start one per GPU "
        "(--target cuda:N) and one for the host (--target cpu). The database must be PostgreSQL, migrated with "
        "`warpmap db upgrade`.",
        epilog="Timings come from WARPMAP_WORKER_HEARTBEAT_S, WARPMAP_WORKER_STALLED_AFTER_S, "
        "WARPMAP_WORKER_STALLED_CHECK_S and WARPMAP_WORKER_POLL_S (see the README).",
    )
    parser.add_argument("--database", "--database-url", dest="database_url", metavar="URL",
                        help="PostgreSQL URL, postgresql+psycopg://user@host:port/db (default: $WARPMAP_DATABASE_URL)")
    parser.add_argument("--target", metavar="cpu|cuda|cuda:N",
                        help="the device: cpu, cuda (GPU 0) or cuda:N (GPU N) (default: cuda when a GPU is found, "
                        "else cpu)")
    parser.add_argument("--name", help="this worker's name in GET /v1/devices (default: host:pid:target)")
    parser.set_defaults(handler="service.cli.worker:run")
