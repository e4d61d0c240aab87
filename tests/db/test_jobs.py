"""The job records on both databases: one active job per key, cancel, trials."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy.engine import Engine

from db import (
    ConflictError,
    NotFoundError,
    TrialResult,
    cancel_job,
    count_jobs,
    count_trials,
    end_job,
    get_job,
    job_kernel_ids,
    list_jobs,
    list_trials,
    lookup_kernel,
    record_trial,
    session_scope,
    start_job,
    submit_job,
    submit_unless_tuned,
)
from db.records import CacheHit
from db.repository import save_kernel
from tests.db.conftest import kernel_result


@pytest.fixture
def job_id(engine: Engine, workload, device, toolchain) -> int:
    with session_scope(engine) as session:
        job, created = submit_job(
            session=session,
            workload=workload,
            device=device,
            toolchain=toolchain,
            strategy="tpe",
            budget={"trials": 8},
        )
    assert created and job.status == "queued"
    return job.id


def test_duplicate_submission_joins_the_active_job(engine: Engine, job_id: int, workload, device, toolchain) -> None:
    with session_scope(engine) as session:
        again, created = submit_job(
            session=session,
            workload=workload,
            device=device,
            toolchain=toolchain,
            strategy="random",
            budget={},
        )
        other, other_created = submit_job(
            session=session,
            workload=workload,
            device=replace(device, driver="1"),
            toolchain=toolchain,
            strategy="tpe",
            budget={},
        )
    assert (again.id, created, again.strategy, again.budget) == (job_id, False, "tpe", {"trials": 8})
    assert other_created and other.id != job_id


def test_a_finished_key_can_be_tuned_again(engine: Engine, job_id: int, workload, device, toolchain) -> None:
    with session_scope(engine) as session:
        cancel_job(session=session, job_id=job_id)
        again, created = submit_job(
            session=session, workload=workload, device=device, toolchain=toolchain, strategy="tpe", budget={}
        )
    assert created and again.id != job_id


def test_cancel_ends_a_job_once(engine: Engine, job_id: int) -> None:
    with session_scope(engine) as session:
        assert cancel_job(session=session, job_id=job_id).status == "cancelled"
        with pytest.raises(ConflictError, match="already ended as cancelled"):
            cancel_job(session=session, job_id=job_id)
        assert start_job(session=session, job_id=job_id, worker="w") is None


def test_unknown_job_and_bad_status(engine: Engine, job_id: int) -> None:
    with session_scope(engine) as session:
        with pytest.raises(NotFoundError, match="12345"):
            get_job(session=session, job_id=12345)
        with pytest.raises(NotFoundError, match="12345"):
            start_job(session=session, job_id=12345, worker="w")
        with pytest.raises(ValueError, match="'paused'"):
            list_jobs(session=session, status="paused")
        with pytest.raises(ValueError, match="'cancelled'"):
            end_job(session=session, job_id=job_id, status="cancelled")


def test_trials_are_stored_in_order_with_all_fields(engine: Engine, job_id: int) -> None:
    trials = [
        TrialResult(
            number=1,
            params={"block": [16, 8]},
            status="ok",
            latency_median_us=12.5,
            latency_p20_us=12.0,
            latency_p80_us=13.1,
            samples=50,
            registers=64,
            shared_bytes=8192,
            compile_ms=110.0,
        ),
        TrialResult(number=0, params={"block": [32, 4]}, status="compile_error", message="ptxas: too many resources"),
    ]
    with session_scope(engine) as session:
        for trial in trials:
            record_trial(session=session, job_id=job_id, trial=trial)
    with session_scope(engine) as session:
        stored = list_trials(session=session, job_id=job_id)
        assert count_trials(session=session, job_id=job_id) == 2
    assert [t.result for t in stored] == [trials[1], trials[0]]


def test_unknown_trial_status_is_rejected() -> None:
    with pytest.raises(ValueError, match="'great'"):
        TrialResult(number=0, params={}, status="great")


def test_a_key_tuned_meanwhile_is_answered_with_its_kernel_and_no_job(engine: Engine, workload, device,
                                                                      toolchain) -> None:
    job = {"strategy": "tpe", "budget": {"trials": 8}}
    with session_scope(engine) as session:
        first, created = submit_unless_tuned(session=session, workload=workload, device=device, toolchain=toolchain,
                                             **job)
        joined = submit_unless_tuned(session=session, workload=workload, device=device, toolchain=toolchain, **job)
        assert created and joined == (first, False)
        # Its worker saves the kernel, then ends the job: a later submission finds the kernel, not a new job.
        start_job(session=session, job_id=first.id, worker="w")
        save_kernel(session=session, workload=workload, device=device, toolchain=toolchain,
                    result=kernel_result(12.5))
        joined = submit_unless_tuned(session=session, workload=workload, device=device, toolchain=toolchain, **job)
        assert isinstance(joined, tuple) and joined[0].id == first.id and not joined[1]
        end_job(session=session, job_id=first.id, status="succeeded")
    with session_scope(engine) as session:
        answer = submit_unless_tuned(session=session, workload=workload, device=device, toolchain=toolchain, **job)
    assert isinstance(answer, CacheHit) and answer.kernel.result.latency_us == 12.5
    with session_scope(engine) as session:
        assert [j.id for j in list_jobs(session=session)] == [first.id]
        again, created = submit_job(session=session, workload=workload, device=device, toolchain=toolchain, **job)
    assert created and again.id != first.id  # a plain submission still queues a new tuning (--force)


def test_jobs_are_listed_newest_first_by_status_and_operator(engine: Engine, workload, device, toolchain) -> None:
    softmax = replace(workload, op="softmax", spec={"rows": 64, "cols": 100})
    with session_scope(engine) as session:
        first, _ = submit_job(session=session, workload=workload, device=device, toolchain=toolchain,
                              strategy="tpe", budget={"trials": 8})
        second, _ = submit_job(session=session, workload=softmax, device=device, toolchain=toolchain,
                               strategy="tpe", budget={"trials": 8})
        start_job(session=session, job_id=second.id, worker="w1")
    with session_scope(engine) as session:
        assert [j.id for j in list_jobs(session=session)] == [second.id, first.id]
        assert [j.id for j in list_jobs(session=session, op="matmul")] == [first.id]
        assert [j.id for j in list_jobs(session=session, status="running")] == [second.id]
        assert list_jobs(session=session, status="running", op="matmul") == []
        assert [j.id for j in list_jobs(session=session, limit=1)] == [second.id]
        assert [j.id for j in list_jobs(session=session, limit=1, offset=1)] == [first.id]
        assert (count_jobs(session=session), count_jobs(session=session, op="softmax"),
                count_jobs(session=session, status="queued", op="softmax")) == (2, 1, 0)


def test_a_jobs_kernel_id_is_its_keys_whichever_job_filed_it(engine: Engine, job_id: int, workload, device,
                                                             toolchain) -> None:
    with session_scope(engine) as session:
        assert job_kernel_ids(session=session, job_ids=[job_id]) == {}
        save_kernel(session=session, workload=workload, device=device, toolchain=toolchain, result=kernel_result(9.0))
        hit = lookup_kernel(session=session, workload=workload, device=device, toolchain=toolchain, record_hit=False)
        assert hit is not None
        kernel_id = hit.kernel.id
        other, _ = submit_job(session=session, workload=workload, device=replace(device, driver="1"),
                              toolchain=toolchain, strategy="tpe", budget={})
    with session_scope(engine) as session:
        assert job_kernel_ids(session=session, job_ids=[job_id, other.id]) == {job_id: kernel_id}
        assert job_kernel_ids(session=session, job_ids=[]) == {}
