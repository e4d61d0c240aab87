"""Trial and job statuses are spelled once, in :mod:`db.models`; the enum and the migrated schema agree.

``db.models.TRIAL_STATUSES`` is the list the storage accepts. The search layer's ``TrialStatus`` cannot
be its source (db imports nothing of search), and a migration is frozen history that must not follow
the models, so both are checked here: the enum against the list, and the CHECK constraints that the
migrations created against the lists, on every backend.
"""

from __future__ import annotations

import re

import pytest
from sqlalchemy import inspect
from sqlalchemy.engine import Engine

from db import ConflictError, TrialResult, list_trials, record_trial, session_scope, submit_job
from db.models import ACTIVE_JOB_STATUSES, JOB_STATUSES, TRIAL_STATUSES, Trial, utcnow
from search.trial import TrialStatus

_QUOTED = re.compile(r"'([^']*)'")


def status_values(engine: Engine, table: str) -> set[str]:
    """The quoted literals of the table's one CHECK constraint on ``status``, as the database reports it.

    Found by its column, not its name, so this checks the predicate alone; the names are checked in
    test_constraint_names.py (before migration 0003 they were doubled: ``ck_wm_trials_ck_wm_trials_status``).
    """
    checks = [c["sqltext"] for c in inspect(engine).get_check_constraints(table) if "status" in c["sqltext"]]
    assert len(checks) == 1, f"{table}: expected one CHECK constraint on status, found {checks}"
    return set(_QUOTED.findall(checks[0]))


def test_the_search_enum_spells_the_stored_statuses() -> None:
    assert tuple(TrialStatus) == TRIAL_STATUSES


def test_literals_are_read_from_either_dialect() -> None:
    sqlite = "status IN ('ok', 'timeout')"
    postgres = "((status)::text = ANY ((ARRAY['ok'::character varying, 'timeout'::character varying])::text[]))"
    assert set(_QUOTED.findall(sqlite)) == set(_QUOTED.findall(postgres)) == {"ok", "timeout"}


@pytest.mark.parametrize(("table", "statuses"), [("wm_trials", TRIAL_STATUSES), ("wm_jobs", JOB_STATUSES)])
def test_the_migrated_constraint_allows_exactly_the_listed_statuses(
    engine: Engine, table: str, statuses: tuple[str, ...]
) -> None:
    assert status_values(engine, table) == set(statuses)


def test_the_migrated_active_job_index_covers_exactly_the_active_statuses(engine: Engine) -> None:
    """Its predicate must match the one the job upsert names (db.models.ACTIVE_JOB_PREDICATE)."""
    (index,) = [i for i in inspect(engine).get_indexes("wm_jobs") if i["name"] == "uq_wm_jobs_active_key"]
    (predicate,) = [value for key, value in index["dialect_options"].items() if key.endswith("_where")]
    assert set(_QUOTED.findall(str(predicate))) == set(ACTIVE_JOB_STATUSES)


def test_every_trial_status_is_stored_and_no_other(engine: Engine, workload, device, toolchain) -> None:
    with session_scope(engine) as session:
        job, _ = submit_job(
            session=session, workload=workload, device=device, toolchain=toolchain, strategy="random", budget={}
        )
        for number, status in enumerate(TrialStatus):
            record_trial(session=session, job_id=job.id, trial=TrialResult(number=number, params={}, status=status))
    with session_scope(engine) as session:
        assert [t.result.status for t in list_trials(session=session, job_id=job.id)] == list(TRIAL_STATUSES)
    # The record refuses a status outside the list, and so does the schema when the record is bypassed.
    with pytest.raises(ValueError, match="unknown status"):
        TrialResult(number=0, params={}, status="pruned")
    with pytest.raises(ConflictError, match="status"):
        _insert_bypassing_the_record(engine, job.id, "pruned")


def _insert_bypassing_the_record(engine: Engine, job_id: int, status: str) -> None:
    with session_scope(engine) as session:
        session.add(Trial(job_id=job_id, number=99, params={}, status=status, message="", created_at=utcnow()))
