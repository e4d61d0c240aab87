"""Fixtures of the job engine's tests: a migrated SQLite database, the host as a target, tiny workloads
whose trials take well under a second, and a helper that submits one as the API would."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from compiler.backends import Target, get_target
from db import JobRecord, WorkloadSpec, create_engine_for, session_scope, submit_job
from service.jobs.devices import identity
from service.jobs.runner import WorkerIdentity

#: Small, awkward shapes: a candidate compiles in about half a second and runs in microseconds.
SOFTMAX = {"op": "softmax", "rows": 7, "cols": 129}
REDUCE = {"op": "reduce", "shape": [13, 67], "axis": 1, "kind": "sum"}


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / f"jobs-{uuid.uuid4().hex[:8]}.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def sqlite_engine(sqlite_url: str) -> Iterator[Engine]:
    engine = create_engine_for(sqlite_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def cpu() -> Target:
    return get_target("cpu")


@pytest.fixture(scope="session")
def cpu_worker(cpu: Target) -> WorkerIdentity:
    return identity(cpu, "test-host:1:cpu", "cpu")


def spec_workload(spec: dict[str, Any]) -> WorkloadSpec:
    from compiler.ops import parse_spec

    parsed = parse_spec(dict(spec))
    return WorkloadSpec(op=parsed.op, spec=parsed.model_dump(mode="json"))


@pytest.fixture
def submit(cpu_worker: WorkerIdentity) -> Callable[..., JobRecord]:
    """``submit(engine, spec, trials=4)``: queue a job for the host as the API does."""

    def make(engine: Engine, spec: dict[str, Any], *, trials: int = 4, level: int = 2,
             worker: WorkerIdentity = cpu_worker) -> JobRecord:
        with session_scope(engine) as session:
            job, created = submit_job(session=session, workload=spec_workload(spec), device=worker.device,
                                      toolchain=worker.toolchain, strategy="default", budget={"trials": trials},
                                      target="cpu", queue=worker.queue,
                                      options={"level": level, "seed": 0, "timeout_s": 60.0})
        assert created
        return job

    return make
