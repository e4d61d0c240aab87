"""The Optuna storage an executor tunes in: the warpmap database itself.

Optuna creates its tables when a storage is first opened; two workers starting together on a new
database both try, and the loser's ``CREATE TABLE`` fails. The loser tries again and finds the tables.
``pool_pre_ping`` replaces connections a restarted database server dropped.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.exc import SQLAlchemyError


def open_storage(url: str, *, attempts: int = 5) -> Any:
    """An ``optuna.storages.RDBStorage`` on ``url`` (its caller disposes ``storage.engine``)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
        except SQLAlchemyError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")
