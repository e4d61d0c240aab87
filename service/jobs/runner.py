"""Running one tuning job: the part every executor shares (the embedded one of ``warpmap serve`` and the
cluster's ``warpmap worker``).

``start_job`` takes the job (None: it was cancelled or already ended, nothing to do), ``search.tune``
searches its space in the job's Optuna study (in the same database, so a job taken over after its worker
died resumes the study: the trials it finished count against the budget and are never measured again),
every trial goes to ``wm_trials`` as it ends, the progress document after each, and the best kernel to
the cache. A job cancelled meanwhile ends after the trial in progress; a worker told to stop (SIGTERM)
ends its trial too and hands the job back (``release_job``) for another worker to resume.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

import db
from compiler.backends import Target
from compiler.ops import parse_spec
from db.errors import UnavailableError
from db.records import DeviceInfo, JobRecord, ToolchainInfo, TrialResult
from db.repository import count_trials, record_trial, save_kernel
from db.session import session_scope
from search.records import tuned_result
from search.strategies import Budget
from search.strategies.workers import HEARTBEAT_S
from search.tune import Progress, Trial, TuneError, tune
from service.tuning import study_key

logger = logging.getLogger(__name__)

#: What a job's ``options`` hold when the submitter left a field out.
DEFAULT_OPTIONS: Mapping[str, Any] = {"level": 2, "seed": 0, "timeout_s": 120.0, "warm_start": True}


class Outcome(StrEnum):
    """How one run of a job ended, as the executor must act on it."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RELEASED = "released"  # the worker was told to stop: the job is queued again
    SKIPPED = "skipped"  # not runnable (cancelled or ended before it started)


@dataclass(frozen=True)
class WorkerIdentity:
    """The executor a job runs on: its name in ``wm_workers`` and the device and toolchain it measures
    with, which must be the job's (the cache files the kernel under the job's key)."""

    name: str
    target: str
    queue: str
    device: DeviceInfo
    toolchain: ToolchainInfo


#: How stale a running trial's heartbeat may be, in a study no other worker shares, before it is taken
#: for lost: four of the driver's heartbeats (``search.strategies.workers.HEARTBEAT_S``).
SOLO_LOST_AFTER_S = 4 * HEARTBEAT_S


def trial_result(trial: Trial, number: int) -> TrialResult:
    """A tuning's trial as ``wm_trials`` stores it: latencies in microseconds, the largest registers and
    static shared bytes of any launch (from the ptxas reports; None on the cpu, which has none)."""
    samples = trial.samples
    usages = [usage for launch in trial.resources for usage in launch.values()]
    registers = [u["registers"] for u in usages if u.get("registers") is not None]
    shared = [u["shared_bytes"] for u in usages if u.get("shared_bytes") is not None]
    return TrialResult(
        number=number,
        params=dict(trial.values),
        status=trial.status.value,
        message=trial.message[:4000],
        latency_median_us=samples.median_ns / 1e3 if samples else None,
        latency_p20_us=samples.p20_ns / 1e3 if samples else None,
        latency_p80_us=samples.p80_ns / 1e3 if samples else None,
        samples=len(samples.samples_ns) if samples else 0,
        registers=max(registers) if registers else None,
        shared_bytes=max(shared) if shared else None,
        compile_ms=trial.compile_s * 1e3,
    )


def progress_document(progress: Progress) -> dict[str, Any]:
    """The progress document of CONTRACT section 2, with a linear ETA once a trial has ended."""
    eta = progress.eta_s
    return {
        "trials_done": progress.done,
        "trials_budget": progress.budget_trials,
        "counts": dict(progress.counts),
        "best_ms": progress.best_ms,
        "elapsed_s": round(progress.elapsed_s, 3),
        "eta_s": None if eta is None else round(eta, 3),
    }


def job_budget(budget: Mapping[str, Any]) -> Budget:
    return Budget(trials=budget.get("trials"), seconds=budget.get("seconds"), patience=budget.get("patience"))


@dataclass
class _Watch:
    """What the callbacks of one run learn: the job's status as the database last said."""

    cancelled: bool = False
    ended_elsewhere: bool = False
    trials: int = 0


def run_job(
    job_id: int,
    *,
    engine: Engine,
    storage: Any,
    worker: WorkerIdentity,
    target: Target,
    stopping: threading.Event | None = None,
    shared: bool = False,
) -> Outcome:
    """Run job ``job_id`` on ``target`` to its end (see the module docstring); never raises for what the
    tuning did: a tuning that finds nothing correct, or breaks, ends the job as failed with the reason.

    ``storage`` is the Optuna storage on the warpmap database; ``stopping`` is set by the worker's
    signal handler: the tuning then ends after its trial and the job is released. ``shared``: other
    workers may run parts of this job's study at the same time. When not, a trial left running in the
    study belongs to an attempt whose worker is gone (the engine hands a job on only then), so it is
    taken for lost as soon as its heartbeat is a few beats old, not after the shared grace period.
    """
    stopping = stopping or threading.Event()
    with session_scope(engine) as session:
        job = db.start_job(session=session, job_id=job_id, worker=worker.name)
    if job is None:
        return Outcome.SKIPPED
    mismatch = _identity_mismatch(job, worker)
    if mismatch:
        return _end(engine, job_id, Outcome.FAILED, mismatch)
    watch = _Watch()
    options = {**DEFAULT_OPTIONS, **dict(job.options)}
    with session_scope(engine) as session:
        db.touch_worker(session=session, name=worker.name, job_id=job_id)
        # Trials of an earlier attempt stay; this attempt numbers its own after them.
        first_number = count_trials(session=session, job_id=job_id)
        warm = [w.schedule for w in db.warm_start_schedules(session=session, workload=job.workload,
                                                            device=job.device, toolchain=job.toolchain)
                ] if options["warm_start"] else []

    def sink(trial: Trial) -> None:
        with session_scope(engine) as session:
            record_trial(session=session, job_id=job_id, trial=trial_result(trial, first_number + watch.trials))
        watch.trials += 1

    def on_progress(progress: Progress) -> None:
        with session_scope(engine) as session:
            current = db.record_progress(session=session, job_id=job_id, progress=progress_document(progress))
            db.touch_worker(session=session, name=worker.name, job_id=job_id)
        watch.cancelled = current.status == "cancelled"
        watch.ended_elsewhere = current.status in ("succeeded", "failed")

    def should_stop() -> bool:
        return watch.cancelled or watch.ended_elsewhere or stopping.is_set()

    started = time.monotonic()
    try:
        spec = parse_spec(dict(job.workload.spec))
        result = tune(spec, target, strategy=job.strategy, budget=job_budget(job.budget), level=int(options["level"]),
                      seed=int(options["seed"]), storage=storage,
                      study_key=study_key(job.workload, job.device, job.toolchain, int(options["level"])),
                      timeout_s=float(options["timeout_s"]), on_progress=on_progress, sink=sink,
                      should_stop=should_stop, lost_after_s=None if shared else SOLO_LOST_AFTER_S, warm_start=warm)
    except TuneError as exc:
        return _after_stop(engine, job_id, watch, stopping) or _end(engine, job_id, Outcome.FAILED, str(exc))
    except Exception as exc:
        if database_lost(exc):  # the job is not at fault: it runs again once the database answers
            raise UnavailableError(f"job {job_id}: the database went away mid-tuning: {exc}") from exc
        logger.exception("job %s failed", job_id)  # a broken tuning fails its job, not the worker
        return _end(engine, job_id, Outcome.FAILED, f"{type(exc).__name__}: {exc}")
    stopped = _after_stop(engine, job_id, watch, stopping)
    if stopped is not None:
        return stopped
    with session_scope(engine) as session:
        save_kernel(session=session, workload=job.workload, device=job.device, toolchain=job.toolchain,
                    result=tuned_result(result))
    logger.info("job %s succeeded: %d trials in %.1f s, best %.4g ms", job_id, len(result.trials),
                time.monotonic() - started, result.latency_ms)
    return _end(engine, job_id, Outcome.SUCCEEDED, None)


def _identity_mismatch(job: JobRecord, worker: WorkerIdentity) -> str | None:
    if job.device.key != worker.device.key or job.toolchain.key != worker.toolchain.key:
        return (f"job {job.id} is for {job.device.key} with {job.toolchain.key}, but worker {worker.name!r} "
                f"measures on {worker.device.key} with {worker.toolchain.key}: it was queued on the wrong queue")
    return None


def _after_stop(engine: Engine, job_id: int, watch: _Watch, stopping: threading.Event) -> Outcome | None:
    """The outcome of a tuning stopped from outside, or None when it ran to its budget. A cancelled job
    keeps its trials and no kernel is filed (the cache holds tunings that finished their budget)."""
    if watch.cancelled:
        return Outcome.CANCELLED
    if watch.ended_elsewhere:  # another worker sharing the study ended the job first
        return Outcome.SKIPPED
    if stopping.is_set():
        with session_scope(engine) as session:
            db.release_job(session=session, job_id=job_id)
        return Outcome.RELEASED
    return None


def _end(engine: Engine, job_id: int, outcome: Outcome, error: str | None) -> Outcome:
    """End the job as ``outcome`` says; ``end_job`` leaves a cancelled job cancelled."""
    status = "failed" if outcome is Outcome.FAILED else "succeeded"
    with session_scope(engine) as session:
        db.end_job(session=session, job_id=job_id, status=status, error=error)
    return outcome


def database_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it: Optuna wraps the driver's errors) is a lost database connection."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OperationalError | UnavailableError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _database_answers(engine: Engine) -> bool:
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
    except Exception:
        return False
    return True


def run_job_through_outages(job_id: int, *, engine: Engine, storage: Any, worker: WorkerIdentity, target: Target,
                            stopping: threading.Event | None = None, give_up_s: float = 600.0,
                            poll_s: float = 1.0, shared: bool = False) -> Outcome:
    """:func:`run_job`, run again each time the database went away mid-job, once it answers again (a
    restarted server): ``start_job`` takes the job back and the study resumes after its last recorded
    trial. Raises :class:`~db.errors.UnavailableError` when the database stays away ``give_up_s``."""
    stopping = stopping or threading.Event()
    while True:
        try:
            return run_job(job_id, engine=engine, storage=storage, worker=worker, target=target, stopping=stopping,
                           shared=shared)
        except UnavailableError as exc:
            logger.warning("%s; waiting for it", exc)
            deadline = time.monotonic() + give_up_s
            while not _database_answers(engine):
                if time.monotonic() > deadline or stopping.wait(poll_s):
                    raise
