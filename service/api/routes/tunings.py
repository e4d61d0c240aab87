"""``/v1/tunings``: a kernel from the cache or a tuning job; the jobs, a page at a time; a job's state, its
trials, cancelling it.

``POST`` answers from the cache when it can (200, ``"cache": "hit"``), else submits a job (202): an
identical request while one is queued or running joins it (``db.submit_job`` keeps one active job
per cache key), one that missed the cache just before a worker saved the kernel is answered with it
(``db.submit_unless_tuned``), and only a new job is handed to the dispatcher. ``?wait=SECONDS`` then reads the job
row every ``api_wait_poll_s`` (in the thread pool: the event loop never blocks) until it ends or the
wait does; a job that succeeded is answered with its kernel (200, ``"cache": "miss"``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Request, Response

from db import (
    cancel_job,
    count_jobs,
    count_trials,
    get_job,
    job_kernel_ids,
    list_jobs,
    list_trials,
    lookup_kernel,
    submit_unless_tuned,
)
from db.models import ACTIVE_JOB_STATUSES
from db.records import CacheHit, JobRecord, WorkloadSpec
from service.api import convert, schemas
from service.api.auth import ReadKey, State, TuneKey
from service.api.errors import documented
from service.api.limits import bounded_budget, check_spec_bounds, invalid, known_query
from service.api.state import ApiState
from service.api.targets import check_template, choose, registered_workers

router = APIRouter(prefix="/v1/tunings", tags=["tunings"], dependencies=[Depends(known_query)])
log = logging.getLogger("warpmap.api")

JobId = Annotated[int, Path(ge=1, le=schemas.MAX_ID, description="the tuning's id")]


def _examples() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for spec in schemas.operator_examples():
        name = f"{spec['op']} {len([k for k in found if k.startswith(spec['op'])]) + 1}"
        found[name] = {"summary": f"{spec['op']} on the cpu, 40 trials",
                       "value": {"operator": spec, "target": "cpu", "budget": {"trials": 40}}}
    return found


async def job_kernel_id(state: ApiState, job: JobRecord) -> int | None:
    hit = await state.read(lookup_kernel, workload=job.workload, device=job.device, toolchain=job.toolchain,
                           record_hit=False)
    return None if hit is None else hit.kernel.id


async def tuning_of(state: ApiState, job: JobRecord) -> schemas.Tuning:
    return convert.tuning(job, await job_kernel_id(state, job))


async def _wait_for(state: ApiState, request: Request, job: JobRecord, seconds: float) -> JobRecord:
    """The job once it ended, or as it is when ``seconds`` ran out or the client went away."""
    deadline = time.monotonic() + seconds
    while job.status in ACTIVE_JOB_STATUSES:
        left = deadline - time.monotonic()
        if left <= 0 or await request.is_disconnected():
            break
        await asyncio.sleep(min(state.settings.api_wait_poll_s, left))
        job = await state.read(get_job, job_id=job.id)
    return job


@router.post(
    "", response_model=schemas.TuningAnswer, status_code=200,
    responses={202: {"model": schemas.TuningAnswer, "description": "a tuning job (new or joined) is under way"},
               **documented(400, 401, 403, 413, 415)},
    summary="The best kernel for an operator: from the cache, or by tuning",
)
async def create_tuning(
    request: Request,
    response: Response,
    body: Annotated[schemas.TuningRequest, Body(openapi_examples=_examples())],
    key: TuneKey,
    state: State,
    wait: Annotated[float, Query(ge=0, le=3600, allow_inf_nan=False,
                                 description="seconds to hold the request until the kernel is ready")] = 0.0,
) -> schemas.TuningAnswer:
    settings = state.settings
    if wait > settings.api_max_wait_s:
        raise invalid(("query", "wait"), f"wait at most {settings.api_max_wait_s:g} seconds", "less_than_equal")
    check_spec_bounds(body.operator, settings)
    budget = bounded_budget(body.budget, key, settings)
    target, worker = choose(await registered_workers(state), body.target)
    check_template(body.operator, target)
    workload = WorkloadSpec(op=body.operator.op, spec=body.operator.model_dump(mode="json"))
    hit = await state.cached_lookup(workload, worker.device, worker.toolchain)
    if hit is not None:
        return _hit(state, hit)
    options = {"level": body.level, "seed": body.seed, "timeout_s": settings.api_trial_timeout_s,
               "warm_start": body.warm_start}
    submitted = await state.write(
        submit_unless_tuned, workload=workload, device=worker.device, toolchain=worker.toolchain,
        strategy=body.strategy, budget=budget, target=target, queue=worker.queue, options=options)
    if isinstance(submitted, CacheHit):  # a worker saved the kernel since the lookup above
        state.uses.hit(submitted.kernel.id)  # counted as cached_lookup counts its hits
        return _hit(state, submitted)
    job, created = submitted
    state.metrics.misses.labels("tunings").inc()
    if created:
        try:
            await state.call(state.dispatcher.enqueue, job)
        except Exception as exc:
            # Nothing would ever run it: take it back out of the active set so the next request retries.
            log.error("could not queue job %d", job.id, exc_info=exc)
            await state.write(cancel_job, job_id=job.id)
            raise HTTPException(503, "the job engine did not take the tuning; retry later",
                                headers={"Retry-After": "5"}) from None
    if wait > 0:
        job = await _wait_for(state, request, job, wait)
    if job.status == "succeeded":
        done = await state.read(lookup_kernel, workload=workload, device=worker.device, toolchain=worker.toolchain,
                                record_hit=False)
        if done is not None:
            return schemas.TuningAnswer(cache="miss", kernel=convert.kernel(done.kernel, done.exact),
                                        tuning=convert.tuning(job, done.kernel.id))
    response.status_code = 202
    return schemas.TuningAnswer(cache="miss", kernel=None, tuning=await tuning_of(state, job))


def _hit(state: ApiState, hit: CacheHit) -> schemas.TuningAnswer:
    state.metrics.hits.labels("tunings").inc()
    return schemas.TuningAnswer(cache="hit", kernel=convert.kernel(hit.kernel, hit.exact), tuning=None)


@router.get("", response_model=schemas.TuningPage, responses=documented(401, 403),
            summary="Tunings, newest first, a page at a time")
async def list_tunings(
    _: ReadKey,
    state: State,
    status: Annotated[schemas.JobStatus | None, Query(description="only tunings with this status")] = None,
    op: Annotated[str | None, Query(pattern=r"^[a-z0-9_]{1,64}$", description="operator name")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=schemas.MAX_ID)] = 0,
) -> schemas.TuningPage:
    items, total = await state.read(_tuning_page, status=status, op=op, limit=limit, offset=offset)
    return schemas.TuningPage(items=items, total=total, limit=limit, offset=offset)


def _tuning_page(*, session: Any, status: str | None, op: str | None, limit: int,
                 offset: int) -> tuple[list[schemas.Tuning], int]:
    """One page of tunings, each with the id of its key's cached kernel as ``GET /v1/tunings/{id}`` gives
    it, read in one session."""
    jobs = list_jobs(session=session, status=status, op=op, limit=limit, offset=offset)
    kernels = job_kernel_ids(session=session, job_ids=[job.id for job in jobs])
    total = count_jobs(session=session, status=status, op=op)
    return [convert.tuning(job, kernels.get(job.id)) for job in jobs], total


@router.get("/{job_id}", response_model=schemas.Tuning, responses=documented(401, 403, 404),
            summary="A tuning's status, worker and progress")
async def read_tuning(
    job_id: JobId,
    _: ReadKey,
    state: State,
) -> schemas.Tuning:
    return await tuning_of(state, await state.read(get_job, job_id=job_id))


@router.delete("/{job_id}", response_model=schemas.Tuning, responses=documented(401, 403, 404, 409),
               summary="Cancel a tuning: the running trial ends, what was measured is kept")
async def cancel_tuning(
    job_id: JobId,
    _: TuneKey,
    state: State,
) -> schemas.Tuning:
    job = await state.write(cancel_job, job_id=job_id)
    await state.call(state.dispatcher.cancel, job_id)
    return await tuning_of(state, job)


@router.get("/{job_id}/trials", response_model=schemas.TrialPage, responses=documented(401, 403, 404),
            summary="A tuning's trials, in order, a page at a time")
async def read_trials(
    job_id: JobId,
    _: ReadKey,
    state: State,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=schemas.MAX_ID)] = 0,
) -> schemas.TrialPage:
    items, total = await state.read(_trial_page, job_id=job_id, limit=limit, offset=offset)
    return schemas.TrialPage(items=[convert.trial(t) for t in items], total=total, limit=limit, offset=offset)


def _trial_page(*, session: Any, job_id: int, limit: int, offset: int) -> tuple[list[Any], int]:
    get_job(session=session, job_id=job_id)  # 404 for an unknown job, not an empty page
    return (list_trials(session=session, job_id=job_id, limit=limit, offset=offset),
            count_trials(session=session, job_id=job_id))
