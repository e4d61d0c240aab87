"""CHECK constraints get the names the models give them (``ck_wm_jobs_status``, not doubled).

Migration 0001 spelled each CHECK constraint's full name, and the naming convention
(``ck_%(table_name)s_%(constraint_name)s``) then prefixed it again, so every database at 0002 holds
``ck_wm_jobs_ck_wm_jobs_status`` and so on. A later migration that drops a constraint by the models'
name would fail; this one renames the four to the models' names. The unique constraints, indexes,
primary and foreign keys were never affected: their conventions do not take ``%(constraint_name)s``.

Why a renaming migration rather than correcting 0001: a migration is history that installed databases
already went through. Correcting 0001 would leave two kinds of databases at the same revision (old
installs with doubled names, new ones without), and every later migration would have to inspect which
it has. Renaming here keeps one schema per revision, so upgrade and downgrade are plain and symmetric.

PostgreSQL renames in place. SQLite cannot rename a constraint, so the table is rebuilt in batch mode
with the constraint dropped by its stored name and added again under the new one, its predicate read
back from the database so that only the name changes. All names are wrapped in ``op.f`` as final:
the convention must not be applied to them once more. Later migrations likewise name a CHECK either
short (``"status"``, which the convention completes) or in full inside ``op.f`` (``op.f("ck_wm_jobs_status")``);
tests/db/test_constraint_names.py refuses a bare full name.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

#: (table, name 0001 left in the database, name the models give), fixed here as history.
RENAMES = (
    ("wm_jobs", "ck_wm_jobs_ck_wm_jobs_status", "ck_wm_jobs_status"),
    ("wm_jobs", "ck_wm_jobs_ck_wm_jobs_attempts", "ck_wm_jobs_attempts"),
    ("wm_trials", "ck_wm_trials_ck_wm_trials_status", "ck_wm_trials_status"),
    ("wm_kernels", "ck_wm_kernels_ck_wm_kernels_latency_positive", "ck_wm_kernels_latency_positive"),
)


def _rename(pairs: list[tuple[str, str, str]]) -> None:
    """Rename each (table, old, new) CHECK constraint; a missing ``old`` is an error, not a skip."""
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        quote = bind.dialect.identifier_preparer.quote
        for table, old, new in pairs:
            op.execute(f"ALTER TABLE {quote(table)} RENAME CONSTRAINT {quote(old)} TO {quote(new)}")
        return
    inspector = sa.inspect(bind)
    for table in dict.fromkeys(table for table, _, _ in pairs):
        # SQLite reports an unnamed CHECK with the name None: no rename can name it, and a None key would
        # make sorted() below raise a TypeError in place of the missing-constraint error.
        stored = {c["name"]: c["sqltext"] for c in inspector.get_check_constraints(table) if c["name"] is not None}
        renames = [(old, new) for t, old, new in pairs if t == table]
        missing = [old for old, _ in renames if old not in stored]
        if missing:
            raise RuntimeError(f"{table}: no CHECK constraint named {', '.join(missing)} (found {sorted(stored)})")
        with op.batch_alter_table(table, recreate="always") as batch:
            for old, new in renames:
                batch.drop_constraint(op.f(old), type_="check")
                batch.create_check_constraint(op.f(new), sa.text(stored[old]))


def upgrade() -> None:
    _rename(list(RENAMES))


def downgrade() -> None:
    _rename([(table, new, old) for table, old, new in RENAMES])
