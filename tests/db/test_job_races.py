"""Job races between processes, on SQLite and PostgreSQL: duplicate submissions make one job.

(Which worker runs a job is the job engine's: procrastinate's locks, tested in tests/service/jobs.)"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from typing import Any

from db import DeviceInfo, ToolchainInfo, WorkloadSpec, create_engine_for, session_scope, submit_job

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


def test_concurrent_duplicate_submissions_make_one_job(url: str, workload, device, toolchain) -> None:
    outcomes = _race(_submit, url, [((workload, device, toolchain),)] * PROCESSES)
    assert len({job_id for job_id, _ in outcomes}) == 1
    assert sum(created for _, created in outcomes) == 1
