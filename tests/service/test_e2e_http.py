"""The whole service over real HTTP: `warpmap serve` (uvicorn on loopback) on a real PostgreSQL, two
`warpmap worker` processes on the cpu target, and the Python client.

Two workloads are tuned through ``POST /v1/tunings``; the worker of one of them is SIGKILLed mid-job.
Both jobs still succeed (the killed one retried on the other worker, its study resumed), the killed
attempt's trials are kept as they were and no point is measured twice (read back through
``GET /v1/tunings/{id}/trials``), a repeated request is a cache hit, and the kernel the service returns
runs here and matches numpy.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from db import create_engine_for
from service.client import Client, Tuning
from tests.conftest import free_port
from tests.service.jobs.conftest import REDUCE, SOFTMAX
from tests.service.test_e2e_workers import _alive, _wait

pytestmark = [pytest.mark.postgres, pytest.mark.slow]



@pytest.fixture
def cluster_url(postgres_server: Any, postgres_template: str) -> str:
    return postgres_server.url(postgres_server.create_database(template=postgres_template))


def _tune_key(url: str) -> str:
    out = subprocess.run([sys.executable, "-m", "service.cli", "keys", "create", "--scope", "tune",
                          "--database-url", url], capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.split()[-1]  # the key is the last word of the output


def test_two_workloads_tuned_over_http_survive_a_killed_worker(
        cluster_url: str, warpmap_process: Callable[..., subprocess.Popen[bytes]]) -> None:
    port = free_port()
    warpmap_process("api", "serve", "--database-url", cluster_url, "--host", "127.0.0.1", "--port", str(port))
    workers = {name: warpmap_process(name, "worker", "--database", cluster_url, "--target", "cpu", "--name", name)
               for name in ("worker-a", "worker-b")}
    key = _tune_key(cluster_url)
    with Client(f"http://127.0.0.1:{port}", key, timeout=30) as client:
        _wait("the API", lambda: _healthy(client), timeout_s=60)
        engine = create_engine_for(cluster_url)
        try:
            _wait("both workers to register", lambda: _alive(engine, set(workers)), timeout_s=60)
        finally:
            engine.dispose()
        budget = {"trials": 8}
        jobs: list[Tuning] = []
        for spec in (SOFTMAX, REDUCE):
            kernel, tuning = client.submit(spec, target="cpu", budget=budget, level=2)
            assert kernel is None and tuning is not None and tuning.status in ("queued", "running")
            assert tuning.warm_start is True  # the service's default, as the client reads it back
            jobs.append(tuning)
        joined = client.submit(SOFTMAX, target="cpu", budget=budget, level=2)[1]
        assert joined is not None and joined.id == jobs[0].id  # an identical request joins the job in flight

        victim = _wait("a job with two trials and a worker", lambda: next(
            (t for t in (client.tuning(j.id) for j in jobs) if t.worker and len(client.trials(t.id)) >= 2), None))
        os.kill(workers[victim.worker].pid, signal.SIGKILL)
        kept = client.trials(victim.id)
        assert 2 <= len(kept) < 8

        done = {j.id: _wait(f"tuning {j.id} to end", lambda j=j: (lambda t: t if t.finished else None)(
            client.tuning(j.id)), timeout_s=180) for j in jobs}
        for job in jobs:
            assert done[job.id].status == "succeeded", done[job.id].error
            trials = client.trials(job.id, limit=100)
            points = [tuple(sorted(t.params.items())) for t in trials]
            assert len(points) == len(set(points)), "a point was measured twice"
            assert 8 <= len(trials) <= 9  # the trial cut short by the kill may be recorded too
        assert client.trials(victim.id)[:len(kept)] == kept  # the killed attempt's trials, kept as they were
        listed = client.tunings(status="succeeded")
        assert {t.id for t in listed} == {j.id for j in jobs} and all(t.kernel_id for t in listed)
        assert [t.id for t in client.tunings(op="softmax")] == [jobs[0].id]
        assert done[victim.id].attempts == 2 and done[victim.id].worker is None

        again, tuning = client.submit(SOFTMAX, target="cpu", budget=budget, level=2)
        assert again is not None and tuning is None  # a cache hit, no job
        run = again.load()
        rng = np.random.default_rng(7)
        x = rng.standard_normal((SOFTMAX["rows"], SOFTMAX["cols"])).astype(np.float32)
        y = np.full_like(x, np.nan)
        run(x=x, y=y)
        e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def _healthy(client: Client) -> bool:
    try:
        return client.health()["status"] == "ok"
    except Exception:  # not listening yet
        return False
