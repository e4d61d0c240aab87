"""Every migration up and down on SQLite and PostgreSQL; the models match the migrated schema."""

from __future__ import annotations

import logging
import multiprocessing
from typing import Any

import optuna
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from db import DatabaseError, current_revision, downgrade, head_revision, upgrade
from db.migrate import MIGRATIONS_DIR, VERSION_TABLE, alembic_config, revisions
from db.models import Base
from db.session import create_engine_for


def _tables(url: str) -> set[str]:
    engine = create_engine_for(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _columns(url: str, table: str) -> set[str]:
    engine = create_engine_for(url)
    try:
        return {column["name"] for column in inspect(engine).get_columns(table)}
    finally:
        engine.dispose()


def test_revisions_form_one_chain_ending_at_head() -> None:
    chain = revisions()
    assert chain == ["0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010"]
    assert head_revision() == chain[-1]


def test_each_migration_up_and_down(empty_url: str) -> None:
    model_tables = set(Base.metadata.tables)
    assert current_revision(empty_url) is None
    for revision in revisions():
        upgrade(empty_url, revision)
        assert current_revision(empty_url) == revision
    # procrastinate's queue tables come with 0007 on PostgreSQL (tests/service/jobs/test_cluster.py)
    assert {t for t in _tables(empty_url) if not t.startswith("procrastinate_")} == model_tables | {VERSION_TABLE}
    for previous in reversed([None, *revisions()[:-1]]):
        downgrade(empty_url, "-1")
        assert current_revision(empty_url) == previous
    assert _tables(empty_url) <= {VERSION_TABLE}
    upgrade(empty_url)  # and up again from nothing
    assert current_revision(empty_url) == head_revision()


def test_models_match_the_migrated_schema(url: str) -> None:
    engine = create_engine_for(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={
                    "compare_type": True,
                    "version_table": VERSION_TABLE,
                    "include_name": lambda name, kind, _: kind != "table" or name.startswith("wm_"),
                },
            )
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_hit_columns_migration_keeps_rows(empty_url: str) -> None:
    upgrade(empty_url, "0001")
    engine = create_engine_for(empty_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO wm_workloads (id, key, op, spec, spec_hash, created_at) VALUES "
                    "(1, 'matmul:1', 'matmul', '{\"schema\": 1, \"data\": {}}', 'h', '2026-01-01 00:00:00')"
                )
            )
    finally:
        engine.dispose()
    upgrade(empty_url, "0002")
    assert {"hits", "last_hit_at"} <= _columns(empty_url, "wm_kernels")
    downgrade(empty_url, "0001")
    assert not {"hits", "last_hit_at"} & _columns(empty_url, "wm_kernels")
    engine = create_engine_for(empty_url)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("SELECT key FROM wm_workloads")).scalars().all() == ["matmul:1"]
    finally:
        engine.dispose()


def test_optuna_tables_live_beside_ours(empty_url: str) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(empty_url)
    optuna.create_study(storage=storage, study_name="s")
    storage.engine.dispose()
    upgrade(empty_url)
    tables = _tables(empty_url)
    assert {"studies", "alembic_version", "wm_kernels", VERSION_TABLE} <= tables
    downgrade(empty_url, "base")
    after = _tables(empty_url)
    assert "studies" in after and "alembic_version" in after
    assert not {t for t in after if t.startswith("wm_") and t != VERSION_TABLE}
    assert optuna.load_study(study_name="s", storage=empty_url).study_name == "s"


def test_migrations_leave_application_loggers_enabled(empty_url: str) -> None:
    """Even with the ini file (which has a logging section) in play, existing loggers stay on."""
    logger = logging.getLogger("warpmap.test.migrations")
    logger.disabled = False
    config = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    config.attributes.update(alembic_config(empty_url).attributes)
    command.upgrade(config, "head")
    assert not logger.disabled
    assert current_revision(empty_url) == head_revision()


def test_unknown_revision_is_a_clear_error(empty_url: str) -> None:
    with pytest.raises(DatabaseError, match="nosuch"):
        upgrade(empty_url, "nosuch")


def _upgrade_after(url: str, start: Any) -> None:
    start.wait(timeout=60)
    upgrade(url)


def test_concurrent_upgrades_at_service_start(empty_url: str) -> None:
    """Several service processes starting at once all run ``upgrade``; all succeed, once."""
    context = multiprocessing.get_context("fork")
    start = context.Barrier(4)
    processes = [context.Process(target=_upgrade_after, args=(empty_url, start)) for _ in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [p.exitcode for p in processes] == [0, 0, 0, 0]
    assert current_revision(empty_url) == head_revision()
