"""The migrated schema names every constraint and index exactly as the models' metadata does.

A later migration refers to a constraint by the name the models give it (dropping a CHECK to widen a
status list, say), so the names in the database must be those, after the naming convention, on every
backend. Alembic's autogenerate comparison does not look at CHECK constraints at all, hence this test.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

import pytest
from sqlalchemy import (
    CheckConstraint,
    ForeignKeyConstraint,
    PrimaryKeyConstraint,
    Table,
    UniqueConstraint,
    inspect,
    text,
)
from sqlalchemy.engine import Engine, Inspector
from sqlalchemy.exc import IntegrityError

from db import downgrade, upgrade
from db.migrate import MIGRATIONS_DIR
from db.models import Base
from db.session import create_engine_for

KINDS = ("check", "unique", "primary", "foreign", "index")


def _model_names(table: Table, kind: str) -> set[str]:
    classes = {
        "check": CheckConstraint,
        "unique": UniqueConstraint,
        "primary": PrimaryKeyConstraint,
        "foreign": ForeignKeyConstraint,
    }
    if kind == "index":
        return {str(index.name) for index in table.indexes}
    return {str(c.name) for c in table.constraints if isinstance(c, classes[kind])}


def _stored_names(inspector: Inspector, table: str, kind: str) -> set[str]:
    if kind == "check":
        return {c["name"] for c in inspector.get_check_constraints(table)}
    if kind == "unique":
        return {c["name"] for c in inspector.get_unique_constraints(table)}
    if kind == "primary":
        return {inspector.get_pk_constraint(table)["name"]}
    if kind == "foreign":
        return {c["name"] for c in inspector.get_foreign_keys(table)}
    # PostgreSQL also reports the index behind each unique constraint; that one is the constraint.
    return {i["name"] for i in inspector.get_indexes(table) if "duplicates_constraint" not in i}


def _stored(url: str, table: str, kind: str) -> set[str]:
    engine = create_engine_for(url)
    try:
        return _stored_names(inspect(engine), table, kind)
    finally:
        engine.dispose()


def test_migrated_names_are_the_models_names(engine: Engine) -> None:
    """Every table and kind at once, so a failure shows the whole difference (one database per backend)."""
    inspector = inspect(engine)
    tables = sorted(Base.metadata.tables)
    stored = {(t, kind): _stored_names(inspector, t, kind) for t in tables for kind in KINDS}
    expected = {(t, kind): _model_names(Base.metadata.tables[t], kind) for t in tables for kind in KINDS}
    assert {k: v for k, v in stored.items() if v != expected[k]} == {}
    assert stored == expected


def test_the_models_name_their_checks_by_the_convention_once() -> None:
    checks = {name for table in Base.metadata.tables.values() for name in _model_names(table, "check")}
    assert checks == {
        "ck_wm_jobs_status",
        "ck_wm_jobs_attempts",
        "ck_wm_trials_status",
        "ck_wm_kernels_latency_positive",
    }


#: One row per table, by plain SQL (the ORM may not match an older schema); ``:bad`` is the checked value.
ROWS = {
    "wm_workloads": "(id, key, op, spec, spec_hash, created_at) VALUES (:id, 'w', 'matmul', '{}', 'h', :when)",
    "wm_devices": (
        "(id, key, name, arch, driver, compute_units, memory_bytes, l2_bytes, created_at)"
        " VALUES (:id, 'd', 'gpu', 'sm_90', '1', 1, 1, 1, :when)"
    ),
    "wm_toolchains": (
        "(id, key, warpmap_version, nvrtc_version, host_compiler, created_at) VALUES (:id, 't', '0', '0', 'g++', :when)"
    ),
    "wm_jobs": (
        "(id, workload_id, device_id, toolchain_id, status, strategy, budget, progress, attempts, created_at,"
        " updated_at) VALUES (:id, 1, 1, 1, :status, 'random', '{}', '{}', :attempts, :when, :when)"
    ),
    "wm_trials": (
        "(id, job_id, number, params, status, message, samples, created_at)"
        " VALUES (:id, 1, :id, '{}', :status, '', 0, :when)"
    ),
    "wm_kernels": (
        "(id, workload_id, device_id, toolchain_id, schedule, source, entry, grid, block, shared_bytes, params,"
        " latency_us, trials_used, size_bytes, created_at, updated_at)"
        " VALUES (:id, 1, 1, 1, '{}', 's', 'k', '[]', '[]', 0, '[]', :latency, 1, 1, :when, :when)"
    ),
}
#: Values that pass every check, per table.
GOOD: dict[str, dict[str, object]] = {
    "wm_jobs": {"status": "queued", "attempts": 0},
    "wm_trials": {"status": "ok"},
    "wm_kernels": {"latency": 1.0},
}


def _insert(engine: Engine, table: str, row_id: int, **values: object) -> None:
    params = {"id": row_id, "when": "2026-01-01 00:00:00", **GOOD.get(table, {}), **values}
    with engine.begin() as connection:
        connection.execute(text(f"INSERT INTO {table} {ROWS[table]}"), params)


@pytest.mark.parametrize(
    ("table", "check", "bad"),
    [
        ("wm_jobs", "ck_wm_jobs_status", {"status": "pruned"}),
        ("wm_jobs", "ck_wm_jobs_attempts", {"attempts": -1}),
        ("wm_trials", "ck_wm_trials_status", {"status": "pruned"}),
        ("wm_kernels", "ck_wm_kernels_latency_positive", {"latency": 0.0}),
    ],
)
def test_renaming_keeps_rows_and_the_checks_still_hold(
    empty_url: str, table: str, check: str, bad: dict[str, object]
) -> None:
    """0003 rebuilds the tables on SQLite: every row survives, and each predicate, renamed, still refuses."""
    upgrade(empty_url, "0002")
    engine = create_engine_for(empty_url)
    try:
        for name in ROWS:
            _insert(engine, name, 1)
        upgrade(empty_url, "0003")
        with engine.connect() as connection:
            for name in ROWS:
                assert connection.execute(text(f"SELECT id FROM {name}")).scalars().all() == [1], name
        with pytest.raises(IntegrityError, match=check):
            _insert(engine, table, 2, **bad)
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("table", "doubled"),
    [
        ("wm_jobs", {"ck_wm_jobs_ck_wm_jobs_status", "ck_wm_jobs_ck_wm_jobs_attempts"}),
        ("wm_trials", {"ck_wm_trials_ck_wm_trials_status"}),
        ("wm_kernels", {"ck_wm_kernels_ck_wm_kernels_latency_positive"}),
    ],
)
def test_downgrade_restores_the_names_0002_had(new_database: Callable[[], str], table: str, doubled: set[str]) -> None:
    url = new_database()
    downgrade(url, "0002")
    assert _stored(url, table, "check") == doubled
    upgrade(url)
    assert _stored(url, table, "check") == _model_names(Base.metadata.tables[table], "check")


def _prefixed_check_names(source: str) -> list[str]:
    """CHECK constraint names spelled in full (``"ck_..."``) but not marked final with ``op.f``.

    The naming convention prefixes such a name once more, which is how 0001 came to store doubled
    names. A name in ``op.f(...)`` is not a bare string here, so it is not reported.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        keywords = {k.arg: k.value for k in node.keywords}
        if func == "CheckConstraint":
            candidates = [keywords.get("name")]
        elif func in ("create_check_constraint", "drop_constraint"):
            candidates = [node.args[0] if node.args else keywords.get("constraint_name")]
        else:
            continue
        found += [c.value for c in candidates if isinstance(c, ast.Constant) and str(c.value).startswith("ck_")]
    return found


def test_no_migration_but_0001_spells_a_check_name_the_convention_prefixes_again() -> None:
    """0001 is history (0003 renames what it made); any later migration must use ``op.f`` or short names."""
    offenders = {
        path.name: sorted(names)
        for path in sorted((MIGRATIONS_DIR / "versions").glob("*.py"))
        if (names := _prefixed_check_names(path.read_text()))
    }
    assert offenders == {
        "0001_initial.py": [
            "ck_wm_jobs_attempts",
            "ck_wm_jobs_status",
            "ck_wm_kernels_latency_positive",
            "ck_wm_trials_status",
        ]
    }


def test_the_guard_sees_full_names_and_lets_final_and_short_ones_pass() -> None:
    source = """
sa.CheckConstraint("x > 0", name="ck_t_x")
batch.create_check_constraint("ck_t_y", "y > 0")
op.drop_constraint("ck_t_z", "t", type_="check")
sa.CheckConstraint("x > 0", name=op.f("ck_t_x"))
op.create_check_constraint(op.f("ck_t_y"), "t", "y > 0")
sa.CheckConstraint("x > 0", name="x")
"""
    assert _prefixed_check_names(source) == ["ck_t_x", "ck_t_y", "ck_t_z"]
