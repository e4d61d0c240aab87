"""Job queue races between processes, on SQLite and PostgreSQL: duplicate submissions and claims."""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from db import DeviceInfo, ToolchainInfo, WorkloadSpec, claim_job, create_engine_for, session_scope, submit_job

PROCESSES = 8


def _in_child(work: Callable[..., Any], url: str, args: tuple[Any, ...], start: Any, outcomes: Any) -> None:
    try:
        engine = create_engine_for(url)
        start.wait(timeout=60)
        with session_scope(engine) as session:
            outcome = work(session, *args)
        engine.dispose()
        outcomes.put(("ok", outcome))
    except BaseException:
        outcomes.put(("error", traceback.format_exc()))
        raise


def _race(work: Callable[..., Any], url: str, args: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``work(session, *a)`` for each ``a`` in its own process, all released at once."""
    context = multiprocessing.get_context("fork")
    start = context.Barrier(len(args))
    outcomes = context.Queue()
    processes = [context.Process(target=_in_child, args=(work, url, a, start, outcomes)) for a in args]
    for process in processes:
        process.start()
    results = [outcomes.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    errors = [detail for status, detail in results if status == "error"]
    assert not errors, errors[0]
    return [detail for _, detail in results]


def _submit(session: Any, keys: tuple[WorkloadSpec, DeviceInfo, ToolchainInfo]) -> tuple[int, bool]:
    workload, device, toolchain = keys
    job, created = submit_job(
        session=session, workload=workload, device=device, toolchain=toolchain, strategy="tpe", budget={}
    )
    return job.id, created


def _claim(session: Any, owner: str) -> int | None:
    job = claim_job(session=session, owner=owner, lease_seconds=60)
    return None if job is None else job.id


def test_concurrent_duplicate_submissions_make_one_job(url: str, workload, device, toolchain) -> None:
    outcomes = _race(_submit, url, [((workload, device, toolchain),)] * PROCESSES)
    assert len({job_id for job_id, _ in outcomes}) == 1
    assert sum(created for _, created in outcomes) == 1


def test_each_job_is_claimed_by_exactly_one_worker(url: str, workload, device, toolchain) -> None:
    engine = create_engine_for(url)
    with session_scope(engine) as session:
        queued = {
            submit_job(
                session=session,
                workload=workload,
                device=replace(device, driver=f"driver-{n}"),
                toolchain=toolchain,
                strategy="tpe",
                budget={},
            )[0].id
            for n in range(3)
        }
    engine.dispose()  # no pooled connection may cross a fork
    claimed = _race(_claim, url, [(f"worker-{n}",) for n in range(PROCESSES)])
    taken = [job_id for job_id in claimed if job_id is not None]
    assert sorted(taken) == sorted(queued)
