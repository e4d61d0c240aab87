"""Our own database exceptions: callers never see a driver's or SQLAlchemy's error types."""

from __future__ import annotations


class DatabaseError(Exception):
    """Any failure of the tuning database."""


class NotFoundError(DatabaseError):
    """A looked-up row does not exist; the message names what was asked for."""


class ConflictError(DatabaseError):
    """A write broke a uniqueness, foreign-key or check constraint."""


class UnavailableError(DatabaseError):
    """The database could not be reached or stayed locked past the busy timeout."""


class SchemaVersionError(DatabaseError):
    """A stored JSON document has a schema version this code does not understand."""
