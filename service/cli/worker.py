"""``warpmap worker``: one cluster worker process on one device (see ``service.jobs.worker``)."""

from __future__ import annotations

import argparse
import logging

from pydantic import ValidationError

from db.errors import DatabaseError
from db.migrate import current_revision, head_revision
from service.cli.db import database_url, shown
from service.cli.errors import CliError
from service.settings import Settings


def run(args: argparse.Namespace) -> int:
    from service.jobs.devices import TargetError, local_target_names, parse_target
    from service.jobs.worker import WorkerConfig, run_worker

    url = database_url(args)
    if not url.startswith("postgresql"):
        raise CliError(f"a worker needs PostgreSQL (procrastinate's queue), not {shown(url)}; on SQLite "
                       "`warpmap serve` runs the jobs itself")
    try:
        settings = Settings(database_url=url)
    except ValidationError as exc:
        raise CliError("; ".join(error["msg"] for error in exc.errors())) from exc
    try:
        if args.target is not None:
            parse_target(args.target)
        target = args.target or local_target_names()[0]
    except TargetError as exc:
        raise CliError(str(exc)) from None
    try:
        revision = current_revision(url)
    except DatabaseError as exc:
        raise CliError(f"{shown(url)}: {exc}") from exc
    if revision != head_revision():
        raise CliError(f"the database at {shown(url)} is at {revision or 'no revision'}, not {head_revision()}; "
                       "run `warpmap db upgrade` first")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = WorkerConfig(url=url, target=target, name=args.name, study_parts=settings.worker_study_parts,
                          heartbeat_s=settings.worker_heartbeat_s,
                          stalled_after_s=settings.worker_stalled_after_s,
                          stalled_check_s=settings.worker_stalled_check_s, poll_s=settings.worker_poll_s)
    try:
        run_worker(config)
    except TargetError as exc:
        raise CliError(str(exc)) from None
    except DatabaseError as exc:
        raise CliError(f"{shown(url)}: {exc}") from exc
    return 0

