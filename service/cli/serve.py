"""``warpmap serve``: the REST API under uvicorn, with the embedded executor on SQLite.

With no configuration: SQLite in the user data folder, migrations applied, one in-process executor per
local device registered in ``wm_workers`` and handed to the app as its dispatcher; unfinished jobs of an
earlier run are resumed. ``--workers 0`` serves the API alone. On PostgreSQL the app defers jobs to
procrastinate and ``warpmap worker`` processes run them.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
from typing import Any

from pydantic import ValidationError

from db.errors import DatabaseError
from db.migrate import current_revision, head_revision, upgrade
from service.cli.db import database_url, shown
from service.cli.errors import CliError
from service.settings import Settings


def validate_options(args: argparse.Namespace) -> None:
    if not 0 < args.port < 65536:
        raise CliError(f"--port must be between 1 and 65535, got {args.port}")
    if args.workers is not None and args.workers < 0:
        raise CliError(f"--workers must be 0 or more, got {args.workers}")


def ready_database(url: str, settings: Settings) -> None:
    """Migrate to the newest schema when the settings say so (the default), else insist on it."""
    try:
        if settings.migrate_on_start:
            upgrade(url)
        elif current_revision(url) != head_revision():
            raise CliError(f"the database at {shown(url)} is not at the newest schema; run `warpmap db upgrade`")
    except DatabaseError as exc:
        raise CliError(f"{shown(url)}: {exc}") from exc


def build_executor(url: str, settings: Settings, workers: int | None) -> Any:
    """The embedded executor for ``workers`` local devices (all when None), or None for none."""
    from db.session import create_engine_for
    from service.jobs.devices import default_worker_name, identity, local_target_names, open_target
    from service.jobs.embedded import EmbeddedExecutor

    names = local_target_names()
    names = names if workers is None else names[:workers]
    if not names:
        return None
    lanes = []
    for name in names:
        target, canonical = open_target(name)
        lanes.append((identity(target, default_worker_name(canonical), canonical), target))
    return EmbeddedExecutor(create_engine_for(url), url, lanes, heartbeat_s=settings.worker_heartbeat_s)


def run(args: argparse.Namespace) -> int:
    validate_options(args)
    url = database_url(args)
    try:
        settings = Settings(database_url=url)
    except ValidationError as exc:
        raise CliError("; ".join(error["msg"] for error in exc.errors())) from exc
    try:
        from service.api import create_app
    except ImportError as exc:
        raise CliError(f"the HTTP API is not part of this build ({exc})") from None
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ready_database(url, settings)
    embedded = url.startswith("sqlite")
    if not embedded and args.workers:
        raise CliError("on PostgreSQL the jobs run in `warpmap worker` processes; --workers applies to SQLite only")
    executor = build_executor(url, settings, args.workers) if embedded else None
    app = create_app(settings, dispatcher=executor) if executor is not None else create_app(settings)
    if executor is not None:
        executor.start(host=socket.gethostname(), pid=os.getpid())
        print("warpmap serve: executors " + ", ".join(f"{w.name} ({w.queue})" for w in executor.workers), flush=True)
    # uvicorn shuts down on SIGTERM/SIGINT, then raises the signal again for the handler it found: this
    # one records it, so the executors stop (their trials end, their jobs are released) and serve exits 0.
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda number, _frame: received.append(number))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    finally:
        if executor is not None:
            executor.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
