"""A job run end to end on the host: trials in wm_trials, progress, the kernel in the cache; a cancel
and a stop keep what was measured, and a released job resumes its study without repeating a point."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from sqlalchemy.engine import Engine

from compiler.backends import Target
from compiler.roofline import stored_roofline
from db import JobRecord, cancel_job, count_trials, get_job, list_trials, lookup_kernel, session_scope
from search.measure import compile_workers
from service.jobs.runner import Outcome, WorkerIdentity, run_job
from tests.service.jobs.conftest import REDUCE, SOFTMAX


@pytest.fixture
def storage(sqlite_url: str):
    storage = optuna.storages.RDBStorage(sqlite_url)
    yield storage
    storage.engine.dispose()


def _trials(engine: Engine, job_id: int) -> list:
    with session_scope(engine) as session:
        return [t.result for t in list_trials(session=session, job_id=job_id)]


def _job(engine: Engine, job_id: int) -> JobRecord:
    with session_scope(engine) as session:
        return get_job(session=session, job_id=job_id)


def _kill_the_measuring_process_while_it_measures(killed: list[int]) -> None:
    """What a candidate that crashes its process does, done from outside: SIGKILL the measuring child
    at a moment it is using the CPU (checking or timing a candidate)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not killed:
        child = next((p for p in multiprocessing.active_children() if p.name == "warpmap-measure"), None)
        before = _busy_ticks(child.pid) if child else None
        time.sleep(0.005)
        after = _busy_ticks(child.pid) if child else None
        if child is not None and before is not None and after is not None and after > before:
            os.kill(child.pid, signal.SIGKILL)
            killed.append(child.pid)


def _busy_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_a_job_runs_to_its_budget_and_files_its_kernel(sqlite_engine: Engine, storage, cpu: Target,
                                                         cpu_worker: WorkerIdentity, submit: Callable) -> None:
    """Also when its measuring process dies mid-trial: that trial fails, the tuning goes on."""
    job = submit(sqlite_engine, SOFTMAX, trials=4)
    killed: list[int] = []
    watcher = _when_trials(sqlite_engine, job.id, 1, lambda: _kill_the_measuring_process_while_it_measures(killed))
    outcome = run_job(job.id, engine=sqlite_engine, storage=storage, worker=cpu_worker, target=cpu)
    watcher.join()
    assert killed and outcome is Outcome.SUCCEEDED
    done = _job(sqlite_engine, job.id)
    assert done.status == "succeeded" and done.error is None and done.attempts == 1
    trials = _trials(sqlite_engine, job.id)
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 4
    ok = [t for t in trials if t.status == "ok"]
    failed = [t for t in trials if t.status != "ok"]
    assert len(ok) == 3 and len(failed) == 1, trials
    assert failed[0].status == "launch_error" and "killed by SIGKILL" in failed[0].message
    for t in ok:
        assert 0 < t.latency_p20_us <= t.latency_median_us <= t.latency_p80_us
        assert t.samples > 0 and t.compile_ms > 0
        assert t.registers is None and t.shared_bytes is None  # the host has no ptxas report
    progress = done.progress
    assert progress["trials_done"] == 4 and progress["trials_budget"] == 4
    assert progress["counts"] == {"ok": 3, "launch_error": 1} and progress["eta_s"] == 0
    assert progress["best_ms"] == pytest.approx(min(t.latency_median_us for t in ok) / 1e3)
    with session_scope(sqlite_engine) as session:
        hit = lookup_kernel(session=session, workload=job.workload, device=job.device, toolchain=job.toolchain,
                            record_hit=False)
    assert hit is not None and hit.exact and hit.kernel.result.trials_used == 4
    # The kernel is filed with the roofs its tuning measured, so every later answer gives its roofline.
    place = stored_roofline(hit.kernel.result)
    assert place is not None and place.bound in ("compute", "memory") and place.fraction > 0


def test_a_job_cancelled_before_its_turn_is_skipped(sqlite_engine: Engine, storage, cpu: Target,
                                                    cpu_worker: WorkerIdentity, submit: Callable) -> None:
    job = submit(sqlite_engine, REDUCE)
    with session_scope(sqlite_engine) as session:
        cancel_job(session=session, job_id=job.id)
    assert run_job(job.id, engine=sqlite_engine, storage=storage, worker=cpu_worker, target=cpu) is Outcome.SKIPPED
    assert _trials(sqlite_engine, job.id) == [] and _job(sqlite_engine, job.id).status == "cancelled"


def _when_trials(engine: Engine, job_id: int, n: int, action: Callable[[], None]) -> threading.Thread:
    """Run ``action`` in a thread as soon as ``n`` trials of the job are recorded."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with session_scope(engine) as session:
                done = count_trials(session=session, job_id=job_id)
            if done >= n:
                action()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_cancel_ends_the_job_after_its_trial_and_keeps_the_trials(sqlite_engine: Engine, storage, cpu: Target,
                                                                     cpu_worker: WorkerIdentity,
                                                                     submit: Callable) -> None:
    job = submit(sqlite_engine, REDUCE, trials=30)

    def cancel() -> None:
        with session_scope(sqlite_engine) as session:
            cancel_job(session=session, job_id=job.id)

    watcher = _when_trials(sqlite_engine, job.id, 2, cancel)
    outcome = run_job(job.id, engine=sqlite_engine, storage=storage, worker=cpu_worker, target=cpu)
    watcher.join()
    assert outcome is Outcome.CANCELLED
    trials = _trials(sqlite_engine, job.id)
    # The batch in flight when the cancel landed ends (one candidate per compile worker), and no other.
    batch = compile_workers()
    assert 2 <= len(trials) <= 2 + 2 * batch
    done = _job(sqlite_engine, job.id)
    # Progress is not written over a cancelled job, so the trials that ended after the cancel are kept but
    # not counted in it.
    assert done.status == "cancelled" and len(trials) - batch <= done.progress["trials_done"] <= len(trials)
    with session_scope(sqlite_engine) as session:
        assert lookup_kernel(session=session, workload=job.workload, device=job.device, toolchain=job.toolchain,
                             record_hit=False) is None


def test_a_stopped_worker_releases_the_job_and_the_next_run_resumes_the_study(
        sqlite_engine: Engine, storage, cpu: Target, cpu_worker: WorkerIdentity, submit: Callable) -> None:
    job = submit(sqlite_engine, SOFTMAX, trials=5)
    stopping = threading.Event()
    watcher = _when_trials(sqlite_engine, job.id, 2, stopping.set)
    first = run_job(job.id, engine=sqlite_engine, storage=storage, worker=cpu_worker, target=cpu, stopping=stopping)
    watcher.join()
    assert first is Outcome.RELEASED
    released = _job(sqlite_engine, job.id)
    assert released.status == "queued" and released.worker is None
    before = _trials(sqlite_engine, job.id)
    assert 2 <= len(before) < 5
    other = replace(cpu_worker, name="test-host:2:cpu")
    assert run_job(job.id, engine=sqlite_engine, storage=storage, worker=other, target=cpu) is Outcome.SUCCEEDED
    after = _trials(sqlite_engine, job.id)
    assert after[:len(before)] == before  # the first attempt's trials are kept as they were
    assert [t.number for t in after] == list(range(5))  # the budget counts them: 5 in all, none measured twice
    assert len({tuple(sorted(t.params.items())) for t in after}) == 5
    assert _job(sqlite_engine, job.id).attempts == 2


def test_a_job_for_another_device_fails_with_the_reason(sqlite_engine: Engine, storage, cpu: Target,
                                                        cpu_worker: WorkerIdentity, submit: Callable) -> None:
    job = submit(sqlite_engine, REDUCE)
    stranger = replace(cpu_worker, device=replace(cpu_worker.device, name="Some Other CPU"))
    assert run_job(job.id, engine=sqlite_engine, storage=storage, worker=stranger, target=cpu) is Outcome.FAILED
    done = _job(sqlite_engine, job.id)
    assert done.status == "failed" and "wrong queue" in done.error and _trials(sqlite_engine, job.id) == []


def _busy_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_a_job_measures_the_workloads_best_on_another_device_right_after_the_default(
        sqlite_engine: Engine, storage, cpu: Target, cpu_worker: WorkerIdentity, submit: Callable) -> None:
    from compiler.ops import get_operator, parse_spec
    from db import save_kernel
    from tests.db.conftest import kernel_result

    job = submit(sqlite_engine, SOFTMAX, trials=2)
    space = get_operator("softmax").space(parse_spec(dict(SOFTMAX)), cpu.device(), 2)
    chosen = next(v for v in reversed(space.valid_values()) if v != space.default_values())
    elsewhere = replace(cpu_worker.device, name="another host's cpu")
    with session_scope(sqlite_engine) as session:
        save_kernel(session=session, workload=job.workload, device=elsewhere, toolchain=job.toolchain,
                    result=replace(kernel_result(3.0), schedule=chosen))
    assert run_job(job.id, engine=sqlite_engine, storage=storage, worker=cpu_worker, target=cpu) is Outcome.SUCCEEDED
    trials = _trials(sqlite_engine, job.id)
    assert trials[0].params == space.default_values() and trials[1].params == chosen
