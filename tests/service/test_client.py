"""The HTTP client against a small in-test service that speaks the API's JSON (CONTRACT section 4) through
``httpx.MockTransport``; the kernels it serves are real cpu builds turned into cache records, so a kernel
the client receives is loaded and run against numpy. (The real API server is checked against this client
where both exist.)
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest

from compiler.backends import get_target
from compiler.numeric import poisoned, relative_error
from compiler.ops import get_operator, parse_spec
from search.records import program_result
from search.verify import compile_schedule
from service.client import (
    AuthenticationError,
    Client,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    ServiceUnavailableError,
    TunedKernel,
    TuningFailedError,
    TuningTimeoutError,
    host_arch,
)

SPEC = {"op": "matmul", "m": 31, "n": 17, "k": 45, "dtype": "float32"}
KEY = "wm_test_tune_key"
NOW = "2026-12-02T00:00:00+00:00"


def _kernel_json(spec_json: dict[str, Any], kernel_id: int, arch: str) -> dict[str, Any]:
    """The API's Kernel for a real cpu build of ``spec_json`` (its default schedule)."""
    target = get_target("cpu")
    operator, spec = get_operator(spec_json["op"]), parse_spec(spec_json)
    space = operator.space(spec, target.device(), 2)  # the level that holds the default
    built = compile_schedule(operator, spec, space.schedule(space.default), target)
    assert built.artifact is not None, built.message
    record = program_result(built.artifact, schedule=space.default, latency_us=12.5, trials_used=3, gflops=1.5,
                            latency_p20_us=12.0, latency_p80_us=13.5, gbs=2.25)
    fields = record.fields()
    device = {"name": target.device().model, "arch": arch, "driver": "none", "compute_units": 2,
              "memory_bytes": 0, "l2_bytes": 1 << 20, "key": "dev"}
    toolchain = {"warpmap": "0.1.0", "nvrtc": "none", "host_compiler": "g++", "key": "tc"}
    return {"id": kernel_id, "operator": spec_json, "target": "cpu", "device": device, "toolchain": toolchain,
            "schedule": fields["schedule"], "latency_ms": record.latency_us / 1000, "gflops": record.gflops,
            "latency_p20_ms": 0.012, "latency_p80_ms": 0.0135, "gbs": record.gbs, "peak_gflops": 400.0,
            "bandwidth_gbs": 90.0, "roofline_fraction": 0.025, "bound": "memory",
            "trials_used": record.trials_used, "hits": 0, "created_at": NOW, "updated_at": NOW,
            "entry": fields["entry"], "source": fields["source"],
            "binary": base64.b64encode(record.binary or b"").decode(), "grid": fields["grid"],
            "block": fields["block"], "shared_bytes": fields["shared_bytes"], "params": fields["params"],
            "program": fields["program"]}


@pytest.fixture(scope="module")
def kernel_json() -> dict[str, Any]:
    return _kernel_json(SPEC, 7, host_arch())


class Service:
    """The API's behaviour, in memory: one kernel in the cache or a job that runs ``polls`` GETs long and
    ends as ``outcome``; every request is kept in ``requests``."""

    def __init__(self, kernel: dict[str, Any], *, cached: bool = False, polls: int = 2,
                 outcome: str = "succeeded", wait_finishes: bool = False) -> None:
        self.kernel, self.cached, self.polls, self.outcome = kernel, cached, polls, outcome
        self.wait_finishes = wait_finishes
        self.requests: list[httpx.Request] = []
        self.job: dict[str, Any] | None = None

    def _tuning(self, status: str, **extra: Any) -> dict[str, Any]:
        done = {"queued": 0, "running": 2}.get(status, 5)
        return {"id": 41, "status": status, "operator": SPEC, "target": "cpu", "queue": "cpu:x86_64:abc",
                "device": self.kernel["device"], "strategy": "default", "budget": {"trials": 5}, "level": 1,
                "worker": "host-1" if status != "queued" else None,
                "progress": {"trials_done": done, "trials_budget": 5, "counts": {"ok": done}, "best_ms": None,
                             "elapsed_s": 1.0, "eta_s": None},
                "error": None, "attempts": 1, "created_at": NOW, "started_at": None, "finished_at": None,
                "kernel_id": None, **extra}

    def _finish(self) -> dict[str, Any]:
        if self.outcome == "succeeded":
            return self._tuning("succeeded", kernel_id=self.kernel["id"], finished_at=NOW)
        return self._tuning(self.outcome, error="every candidate failed" if self.outcome == "failed" else None)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("authorization") != f"Bearer {KEY}":
            return httpx.Response(401, json={"detail": "no API key: send Authorization: Bearer <key>"})
        path, method = request.url.path, request.method
        if (method, path) == ("POST", "/v1/tunings"):
            body = json.loads(request.content)
            if body.get("target") not in (None, "cpu"):
                return httpx.Response(422, json={"detail": [{"loc": ["body", "target"], "msg": "no worker serves "
                                                             f"{body['target']!r}", "type": "value_error"}]})
            if self.cached:
                return httpx.Response(200, json={"cache": "hit", "kernel": self.kernel, "tuning": None})
            if self.wait_finishes and "wait" in request.url.params:
                return httpx.Response(200, json={"cache": "miss", "kernel": self.kernel, "tuning": self._finish()})
            self.job = self._tuning("queued")
            return httpx.Response(202, json={"cache": "miss", "kernel": None, "tuning": self.job})
        if method == "GET" and path == "/v1/tunings/41" and self.job is not None:
            self.polls -= 1
            self.job = self._finish() if self.polls <= 0 else self._tuning("running")
            return httpx.Response(200, json=self.job)
        if method == "DELETE" and path == "/v1/tunings/41" and self.job is not None:
            if self.job["status"] in ("succeeded", "failed", "cancelled"):
                return httpx.Response(409, json={"detail": f"tuning 41 already {self.job['status']}"})
            self.job = self._tuning("cancelled")
            return httpx.Response(200, json=self.job)
        if (method, path) == ("GET", "/v1/tunings"):
            items = [self._tuning("succeeded", kernel_id=self.kernel["id"]), self._tuning("running", id=40)]
            return httpx.Response(200, json={"items": items, "total": 2, "limit": 50, "offset": 0})
        if method == "GET" and path == f"/v1/kernels/{self.kernel['id']}":
            return httpx.Response(200, json=self.kernel)
        if (method, path) == ("GET", "/v1/kernels"):
            summary = {k: v for k, v in self.kernel.items() if k not in ("entry", "source", "binary", "grid", "block",
                                                                         "shared_bytes", "params", "program")}
            return httpx.Response(200, json={"items": [summary], "total": 1, "limit": 50, "offset": 0})
        if (method, path) == ("POST", "/v1/kernels/lookup"):
            body = json.loads(request.content)
            if body["operator"] == SPEC:
                return httpx.Response(200, json={**self.kernel, "exact": True})
            if body["nearest"]:
                return httpx.Response(200, json={**self.kernel, "exact": False})
            return httpx.Response(404, json={"detail": "no kernel for this operator on cpu"})
        if (method, path) == ("GET", "/v1/admin"):
            return httpx.Response(403, json={"detail": "this key has scopes tune; the request needs admin"})
        return httpx.Response(404, json={"detail": f"tuning {path.rsplit('/', 1)[-1]} not found"})


def _client(service: Callable[[httpx.Request], httpx.Response], key: str | None = KEY) -> Client:
    return Client("http://warpmap.test", api_key=key, transport=httpx.MockTransport(service))


def _run_against_numpy(kernel: TunedKernel) -> float:
    operator, spec = get_operator(SPEC["op"]), parse_spec(SPEC)
    inputs = operator.inputs(spec, np.random.default_rng(11))
    (out,) = operator.outputs(spec)
    c = poisoned(out.shape, out.dtype)
    kernel.load()(**inputs, c=c)
    return relative_error(c.astype(np.float64), operator.reference(spec, inputs)["c"])


def test_a_cache_hit_is_one_request_and_its_kernel_runs(kernel_json) -> None:
    service = Service(kernel_json, cached=True)
    kernel = _client(service).tune(SPEC, target="cpu", wait=5)
    assert len(service.requests) == 1 and service.requests[0].url.params["wait"] == "5"
    assert json.loads(service.requests[0].content) == {"operator": SPEC, "target": "cpu"}  # nothing unasked
    assert kernel.id == 7 and kernel.program is not None and kernel.binary is not None
    assert _run_against_numpy(kernel) <= 1e-5


def test_a_miss_is_polled_until_the_job_succeeds_then_the_kernel_is_fetched(kernel_json) -> None:
    service = Service(kernel_json, polls=3)
    kernel = _client(service).tune(SPEC, strategy="random", budget={"trials": 5}, level=1, wait=30, poll_s=0.01)
    body = json.loads(service.requests[0].content)
    assert body == {"operator": SPEC, "strategy": "random", "budget": {"trials": 5}, "level": 1}
    paths = [(r.method, r.url.path) for r in service.requests]
    assert paths == [("POST", "/v1/tunings"), *[("GET", "/v1/tunings/41")] * 3, ("GET", "/v1/kernels/7")]
    assert _run_against_numpy(kernel) <= 1e-5


def test_a_wait_that_sees_the_job_succeed_answers_with_the_kernel(kernel_json) -> None:
    service = Service(kernel_json, wait_finishes=True)
    kernel = _client(service).tune(SPEC, wait=60)
    assert len(service.requests) == 1 and kernel.id == 7


@pytest.mark.parametrize("outcome", ["failed", "cancelled"])
def test_a_job_that_ends_without_a_kernel_raises_with_its_id(kernel_json, outcome) -> None:
    with pytest.raises(TuningFailedError, match=f"tuning 41 {outcome}") as caught:
        _client(Service(kernel_json, outcome=outcome, polls=1)).tune(SPEC, wait=30, poll_s=0.01)
    assert caught.value.job_id == 41 and caught.value.tuning.status == outcome
    if outcome == "failed":
        assert "every candidate failed" in str(caught.value)


def test_a_wait_that_ends_first_is_a_timeout_naming_the_job(kernel_json) -> None:
    service = Service(kernel_json, polls=10_000)
    with pytest.raises(TuningTimeoutError, match=r"tuning 41 still running after 0 s, 2 of 5 trials") as caught:
        _client(service).tune(SPEC, wait=0.2, poll_s=0.02)
    assert isinstance(caught.value, TimeoutError) and caught.value.job_id == 41


def test_a_service_that_holds_requests_for_less_is_polled_instead(kernel_json) -> None:
    service = Service(kernel_json, polls=2)
    inner = service.__call__

    def short_holds(request: httpx.Request) -> httpx.Response:
        if float(request.url.params.get("wait", 0)) > 30:
            service.requests.append(request)
            return httpx.Response(422, json={"detail": [{"loc": ["query", "wait"], "msg": "wait at most 30 seconds"}]})
        return inner(request)

    kernel = _client(short_holds).tune(SPEC, wait=1000, poll_s=0.01)
    assert kernel.id == 7
    assert [r.url.params.get("wait") for r in service.requests[:2]] == ["300", None]  # held at most 300 s, then 0


def test_tuning_and_cancel(kernel_json) -> None:
    service = Service(kernel_json, polls=10_000)
    client = _client(service)
    _, job = client.submit(SPEC)
    assert job is not None and job.status == "queued" and "wait" not in service.requests[0].url.params
    assert client.tuning(41).status == "running"
    cancelled = client.cancel(41)
    assert cancelled.status == "cancelled" and cancelled.finished
    with pytest.raises(ConflictError, match="409 tuning 41 already cancelled") as caught:
        client.cancel(41)
    assert caught.value.status == 409 and caught.value.detail == "tuning 41 already cancelled"


def test_lookup_is_exact_unless_nearest_is_asked(kernel_json) -> None:
    client = _client(Service(kernel_json))
    found = client.lookup(SPEC, target="cpu")
    assert found is not None and found.exact is True
    other = {**SPEC, "m": 32}
    assert client.lookup(other) is None
    near = client.lookup(other, nearest=True)
    assert near is not None and near.exact is False


def test_kernels_lists_summaries_with_the_filters_sent(kernel_json) -> None:
    service = Service(kernel_json)
    (summary,) = _client(service).kernels(op="matmul", dtype="float32", limit=10)
    assert summary.id == 7 and summary.device.arch == kernel_json["device"]["arch"]
    assert summary.latency_ms == pytest.approx(0.0125) and summary.created_at is not None
    assert (summary.latency_p20_ms, summary.latency_p80_ms, summary.gbs) == (0.012, 0.0135, 2.25)
    assert (summary.peak_gflops, summary.bandwidth_gbs, summary.roofline_fraction, summary.bound) == (
        400.0, 90.0, 0.025, "memory")
    params = service.requests[0].url.params
    assert (params["op"], params["dtype"], params["limit"], params["offset"]) == ("matmul", "float32", "10", "0")
    assert "device" not in params


def test_tunings_lists_a_page_with_the_filters_sent(kernel_json) -> None:
    service = Service(kernel_json)
    done, running = _client(service).tunings(status="running", limit=10, offset=20)
    assert (done.id, done.status, done.kernel_id) == (41, "succeeded", 7)
    assert (running.id, running.status, running.kernel_id) == (40, "running", None)
    params = service.requests[0].url.params
    assert (params["status"], params["limit"], params["offset"]) == ("running", "10", "20") and "op" not in params


def test_errors_carry_the_services_detail(kernel_json) -> None:
    service = Service(kernel_json)
    with pytest.raises(AuthenticationError, match="401 no API key") as caught:
        _client(service, key=None).tuning(41)
    assert caught.value.status == 401
    with pytest.raises(NotFoundError, match="404 tuning 99 not found"):
        _client(service).tuning(99)
    with pytest.raises(InvalidRequestError, match=r"422 body\.target: no worker serves 'cuda:3'") as invalid:
        _client(service).tune(SPEC, target="cuda:3")
    assert invalid.value.fields == ("body.target",)
    with pytest.raises(PermissionDeniedError, match="needs admin"):
        _client(service)._json("GET", "/v1/admin")


def test_a_service_that_does_not_answer_is_a_clear_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(ServiceUnavailableError, match=r"GET http://warpmap.test/v1/tunings/1: no answer"):
        _client(refuse).tuning(1)

    def crash(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="Internal Server Error")

    with pytest.raises(ServiceUnavailableError, match="500 Internal Server Error"):
        _client(crash).tuning(1)


def test_a_cpu_kernel_for_another_instruction_set_is_refused_unless_asked(kernel_json) -> None:
    kernel = TunedKernel.parse(kernel_json)
    foreign = dataclasses.replace(kernel, device=dataclasses.replace(kernel.device, arch="cpu-f32x8-0123456789ab"))
    with pytest.raises(ValueError, match=r"built for .* \(cpu-f32x8-0123456789ab\); this host is"):
        foreign.load()
    assert callable(foreign.load(check_device=False))


def test_a_kernel_the_client_cannot_read_is_a_client_error(kernel_json) -> None:
    from service.client import ClientError

    for broken in ({**kernel_json, "binary": "not base64!"}, {k: v for k, v in kernel_json.items() if k != "grid"}):
        service = Service(broken, cached=True)
        with pytest.raises(ClientError, match="cannot read"):
            _client(service).tune(SPEC)


def test_specs_may_be_models_and_anything_else_is_refused(kernel_json) -> None:
    service = Service(kernel_json, cached=True)
    _client(service).tune(parse_spec(SPEC))
    sent = json.loads(service.requests[0].content)["operator"]
    assert {k: sent[k] for k in SPEC} == SPEC
    with pytest.raises(TypeError, match="an operator spec is a mapping"):
        _client(service).tune("matmul 31x17x45")


def test_polling_backs_off(kernel_json, monkeypatch) -> None:
    sleeps: list[float] = []
    clock = itertools.count()
    monkeypatch.setattr("service.client.time.sleep", sleeps.append)
    monkeypatch.setattr("service.client.time.monotonic", lambda: next(clock) * 0.001)
    _client(Service(kernel_json, polls=6)).tune(SPEC, wait=100, poll_s=1.0)
    assert sleeps == pytest.approx([1.0, 1.5, 2.25, 3.375, 5.0625, 7.59375])
