"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from db.errors import SchemaVersionError


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in, aware UTC datetimes out.

    SQLite has no time zones and hands back naive values; storing naive UTC everywhere and attaching
    UTC on the way out makes comparisons and arithmetic identical on both databases.
    """

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()} given: pass an aware UTC time")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class VersionedJSON(TypeDecorator[Any]):
    """A JSON document stored inside an envelope that names its schema version.

    The column holds ``{"schema": <version>, "data": <value>}``; Python code sees only ``<value>``.
    Reading a document written by a newer schema raises :class:`SchemaVersionError` instead of
    misreading it.

    >>> column_type = VersionedJSON(version=1)
    >>> column_type.process_bind_param({"block": 128}, None)
    {'schema': 1, 'data': {'block': 128}}
    """

    impl = JSON
    cache_ok = True

    def __init__(self, *, version: int) -> None:
        super().__init__()
        self.version = version

    def process_bind_param(self, value: Any, dialect: Dialect | None) -> Any:
        return None if value is None else {"schema": self.version, "data": value}

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict) or "schema" not in value or "data" not in value:
            raise SchemaVersionError(f"JSON column holds {value!r}, not a versioned document")
        if value["schema"] != self.version:
            raise SchemaVersionError(
                f"JSON document has schema version {value['schema']!r}; this code reads {self.version}"
            )
        return value["data"]
