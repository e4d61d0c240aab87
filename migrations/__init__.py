"""Alembic migrations of the tuning database; run them with ``warpmap db upgrade`` or :mod:`db.migrate`."""
