"""Fixtures of the API tests: an app on a real database (SQLite and PostgreSQL), keys of each scope, a
registered cpu worker, and a dispatcher that records what the API handed it.

The worker's side of a job (start, trials, kernel, end) is played by the tests through the same
``db`` functions a worker calls; the dispatcher here only records, since running jobs is the job
engine's (tested with it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from compiler.ops import parse_spec
from db.api_keys import create_api_key
from db.records import DeviceInfo, JobRecord, KernelResult, ToolchainInfo, WorkloadSpec
from db.repository import lookup_kernel, save_kernel
from db.session import create_engine_for, session_scope
from db.workers import register_worker
from service.api import create_app
from service.settings import Settings

CPU = DeviceInfo(name="AMD EPYC 9B45", arch="cpu-f32x16-0a1b2c3d4e5f", driver="none", compute_units=2)
GPU = DeviceInfo(name="NVIDIA H100 80GB HBM3", arch="sm_90", driver="580.65.06", compute_units=132)
TOOLCHAIN = ToolchainInfo(warpmap="0.1.0+abc", nvrtc="none", host_compiler="g++ 12.2.0 0123456789ab")
MATMUL = {"op": "matmul", "m": 67, "n": 129, "k": 31}


@dataclass
class RecordingDispatcher:
    """Remembers the jobs it was given and the cancellations; runs nothing."""

    enqueued: list[JobRecord] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)

    def enqueue(self, job: JobRecord) -> None:
        self.enqueued.append(job)

    def cancel(self, job_id: int) -> None:
        self.cancelled.append(job_id)


def workload(spec: dict[str, Any]) -> WorkloadSpec:
    """The workload the API files ``spec`` under: every field of the operator's model, defaults included."""
    model = parse_spec(spec)
    return WorkloadSpec(op=model.op, spec=model.model_dump(mode="json"))


def kernel_result(latency_us: float = 12.5, *, tag: str = "wm_matmul") -> KernelResult:
    return KernelResult(
        schedule={"mc": 64, "nc": 96}, source=f'extern "C" void {tag}(float* a) {{}}', entry=tag, grid=(1, 1, 1),
        block=(1, 1, 1), shared_bytes=0,
        params=({"name": "a", "dtype": "float32", "pointer": True}, {"name": "c", "dtype": "float32", "pointer": True}),
        latency_us=latency_us, trials_used=9, binary=b"\x7fELF\x02\x01\x00", gflops=41.5,
        latency_p20_us=0.96 * latency_us, latency_p80_us=1.08 * latency_us, gbs=7.25,
        peak_gflops=415.0, bandwidth_gbs=58.0)


@dataclass
class Api:
    """A running app (its test client) and the helpers that play the rest of the service around it."""

    client: TestClient
    engine: Engine
    dispatcher: RecordingDispatcher
    keys: dict[str, str]
    url: str
    cpu: DeviceInfo = CPU
    gpu: DeviceInfo = GPU
    toolchain: ToolchainInfo = TOOLCHAIN
    matmul: dict[str, Any] = field(default_factory=lambda: dict(MATMUL))

    def headers(self, scope: str = "tune") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[scope]}"}

    def db(self, function: Callable[..., Any], **kwargs: Any) -> Any:
        with session_scope(self.engine) as session:
            return function(session=session, **kwargs)

    workload = staticmethod(workload)
    kernel_result = staticmethod(kernel_result)

    def store(self, spec: dict[str, Any], device: DeviceInfo = CPU, latency_us: float = 12.5) -> int:
        """Save a kernel for ``spec`` as a worker would; its id."""
        self.db(save_kernel, workload=workload(spec), device=device, toolchain=TOOLCHAIN,
                result=kernel_result(latency_us))
        hit = self.db(lookup_kernel, workload=workload(spec), device=device, toolchain=TOOLCHAIN, record_hit=False)
        return int(hit.kernel.id)

    def new_app(self, **overrides: Any) -> Any:
        """Another app on the same database, for serving under a real server."""
        return create_app(settings_for(self.url, **overrides), dispatcher=self.dispatcher)

    def register(self, name: str = "cpu-0", target: str = "cpu", device: DeviceInfo = CPU) -> None:
        self.db(register_worker, name=name, target=target, queue=f"{target.split(':')[0]}:{device.arch}",
                device=device, toolchain=TOOLCHAIN, host="test-host", pid=4242)


def settings_for(url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": url, "migrate_on_start": False, "api_key_cache_s": 0.0, "api_worker_cache_s": 0.0,
        "api_hit_cache_s": 0.0, "api_flush_s": 3600.0, "api_wait_poll_s": 0.02, **overrides,
    }
    return Settings(**values)


@pytest.fixture
def make_api(url: str) -> Iterator[Callable[..., Api]]:
    """Builds apps on the test's database (keys and a cpu worker made once); each is closed at the end."""
    made: list[Api] = []
    engine = create_engine_for(url)
    keys: dict[str, str] = {}
    with session_scope(engine) as session:
        for scope in ("read", "tune", "admin"):
            keys[scope], _ = create_api_key(session=session, name=f"{scope} test key", scopes=[scope])
        keys["limited"], _ = create_api_key(session=session, name="limited", scopes=["tune"], max_trials=10,
                                            max_seconds=60.0)

    def make(with_worker: bool = True, **overrides: Any) -> Api:
        dispatcher = RecordingDispatcher()
        app = create_app(settings_for(url, **overrides), dispatcher=dispatcher)
        client = TestClient(app)
        client.__enter__()
        api = Api(client=client, engine=engine, dispatcher=dispatcher, keys=keys, url=url)
        if with_worker and not made:
            api.register()
        made.append(api)
        return api

    try:
        yield make
    finally:
        for api in made:
            api.client.__exit__(None, None, None)
        engine.dispose()


@pytest.fixture
def api(make_api: Callable[..., Api]) -> Api:
    return make_api()
