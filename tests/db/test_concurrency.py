"""Eight processes race to store results for one cache key, on SQLite (a WAL file) and PostgreSQL."""

from __future__ import annotations

import multiprocessing
import random
import traceback
from typing import Any

from sqlalchemy import func, select

from db import (
    DeviceInfo,
    KernelResult,
    ToolchainInfo,
    TrialResult,
    WorkloadSpec,
    count_trials,
    create_engine_for,
    record_trial,
    save_kernel,
    session_scope,
    submit_job,
)
from db.models import Kernel

PROCESSES = 8
WRITES_PER_PROCESS = 5


def _writer(
    url: str,
    job_id: int,
    latencies: list[float],
    keys: tuple[WorkloadSpec, DeviceInfo, ToolchainInfo],
    template: KernelResult,
    start: Any,
    outcomes: Any,
) -> None:
    workload, device, toolchain = keys
    try:
        engine = create_engine_for(url)
        start.wait(timeout=60)
        stored = []
        for number, latency in enumerate(latencies):
            result = KernelResult(**{**template.__dict__, "latency_us": latency, "entry": f"k_{latency}"})
            with session_scope(engine) as session:
                record_trial(
                    session=session,
                    job_id=job_id,
                    trial=TrialResult(
                        number=number, params={"latency": latency}, status="ok", latency_median_us=latency
                    ),
                )
                if save_kernel(session=session, workload=workload, device=device, toolchain=toolchain, result=result):
                    stored.append(latency)
        engine.dispose()
        outcomes.put(("ok", stored))
    except BaseException:
        outcomes.put(("error", traceback.format_exc()))
        raise


def test_concurrent_writers_leave_only_the_fastest(url: str, workload, device, toolchain, make_result) -> None:
    engine = create_engine_for(url)
    with session_scope(engine) as session:
        job, _ = submit_job(
            session=session,
            workload=workload,
            device=device,
            toolchain=toolchain,
            strategy="random",
            budget={},
        )
    engine.dispose()  # no pooled connection may cross a fork

    latencies = [float(n) + 0.25 for n in range(1, PROCESSES * WRITES_PER_PROCESS + 1)]
    random.Random(7).shuffle(latencies)
    fastest = min(latencies)
    context = multiprocessing.get_context("fork")
    start = context.Barrier(PROCESSES)
    outcomes = context.Queue()
    workers = [
        context.Process(
            target=_writer,
            args=(
                url,
                job.id,
                latencies[i * WRITES_PER_PROCESS : (i + 1) * WRITES_PER_PROCESS],
                (workload, device, toolchain),
                make_result(1.0),
                start,
                outcomes,
            ),
        )
        for i in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    results = [outcomes.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    errors = [detail for status, detail in results if status == "error"]
    assert not errors, errors[0]
    assert all(worker.exitcode == 0 for worker in workers)

    stored = sorted(latency for _, accepted in results for latency in accepted)
    assert fastest in stored  # the winner's own write reported success
    engine = create_engine_for(url)
    try:
        with session_scope(engine) as session:
            rows = session.execute(select(Kernel.latency_us, Kernel.entry)).all()
            assert [tuple(row) for row in rows] == [(fastest, f"k_{fastest}")]
            assert session.execute(select(func.count(Kernel.id))).scalar_one() == 1
            assert count_trials(session=session, job_id=job.id) == PROCESSES * WRITES_PER_PROCESS
    finally:
        engine.dispose()
