"""``warpmap keys create | ls | revoke``: the service's API keys, stored as SHA-256 hashes only.

Examples::

    warpmap keys create --scope tune --name ci          # the key is the last word printed
    warpmap keys create --scope read --max-trials 100
    warpmap keys ls
    warpmap keys revoke 3
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from db.api_keys import create_api_key, list_api_keys, revoke_api_key
from db.errors import DatabaseError, NotFoundError
from db.models import utcnow
from db.records import ApiKeyRecord
from db.session import create_engine_for, session_scope
from service.cli.db import database_url, shown
from service.cli.errors import CliError
from service.cli.table import print_table
from service.cli.tune import ready_database


def _run(args: argparse.Namespace, action: Any) -> Any:
    url = database_url(args)
    try:
        ready_database(url)
        engine = create_engine_for(url)
        try:
            with session_scope(engine) as session:
                return action(session)
        finally:
            engine.dispose()
    except NotFoundError as exc:
        raise CliError(str(exc)) from None
    except DatabaseError as exc:
        raise CliError(f"{shown(url)}: {exc}") from None


def _limits(key: ApiKeyRecord) -> str:
    parts = []
    if key.max_trials is not None:
        parts.append(f"{key.max_trials} trials")
    if key.max_seconds is not None:
        parts.append(f"{key.max_seconds:g} s")
    return ", ".join(parts) or "service's"


def create_command(args: argparse.Namespace) -> int:
    if args.max_trials is not None and args.max_trials < 1:
        raise CliError(f"--max-trials must be at least 1, got {args.max_trials}")
    if args.max_seconds is not None and not (args.max_seconds > 0 and math.isfinite(args.max_seconds)):
        raise CliError(f"--max-seconds must be a number of seconds above 0, got {args.max_seconds}")
    name = args.name or f"{args.scope} key of {utcnow():%Y-%m-%d}"
    token, key = _run(args, lambda session: create_api_key(
        session=session, name=name, scopes=[args.scope], max_trials=args.max_trials, max_seconds=args.max_seconds))
    # The key last, alone after a colon, so `... | awk '{print $NF}'` takes it.
    print(f"created API key {key.id} ({name!r}, scope {args.scope}, limits: {_limits(key)}); it is shown only "
          f"once: {token}")
    return 0


def _when(value: Any) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M")


def ls_command(args: argparse.Namespace) -> int:
    keys: list[ApiKeyRecord] = _run(args, lambda session: list_api_keys(session=session))
    if args.json:
        for key in keys:
            print(json.dumps({"id": key.id, "name": key.name, "prefix": key.prefix, "scopes": list(key.scopes),
                              "max_trials": key.max_trials, "max_seconds": key.max_seconds,
                              "created_at": key.created_at.isoformat() if key.created_at else None,
                              "last_used_at": key.last_used_at.isoformat() if key.last_used_at else None,
                              "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None}))
        return 0
    if not keys:
        print("no API keys; create one with `warpmap keys create --scope tune`")
        return 0
    rows = [[key.id, f"{key.prefix}...", ",".join(key.scopes), _limits(key), _when(key.created_at),
             _when(key.last_used_at), "revoked " + _when(key.revoked_at) if key.revoked_at else "live", key.name]
            for key in keys]
    print_table(["id", "key", "scopes", "limits", "created", "last used", "state", "name"], rows)
    return 0


def revoke_command(args: argparse.Namespace) -> int:
    key: ApiKeyRecord = _run(args, lambda session: revoke_api_key(session=session, key_id=args.key_id))
    print(f"revoked API key {key.id} ({key.name!r}, {key.prefix}...) at {_when(key.revoked_at)} UTC")
    return 0
