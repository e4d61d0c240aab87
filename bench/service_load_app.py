"""The app ``bench/service_load.py`` serves: the API from the environment's settings, with a dispatcher that
refuses jobs (the bench only reads the cache, so a job reaching it is a bench error)."""

from __future__ import annotations

from fastapi import FastAPI

from db.records import JobRecord
from service.api import create_app


class NoJobs:
    def enqueue(self, job: JobRecord) -> None:
        raise RuntimeError(f"the load bench submitted job {job.id}: its lookup missed the cache")

    def cancel(self, job_id: int) -> None:
        raise RuntimeError("the load bench cancels nothing")


def app() -> FastAPI:
    return create_app(dispatcher=NoJobs())
