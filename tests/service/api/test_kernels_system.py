"""``/v1/kernels`` (filters, pages, whole kernels, lookups), ``/v1/devices``, ``/readyz`` and ``/metrics``."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from db.migrate import downgrade
from db.records import TrialResult
from db.repository import record_trial
from db.workers import stop_worker


def _fill(api: Any) -> dict[str, int]:
    ids = {
        "f32": api.store(api.matmul),
        "f16": api.store({**api.matmul, "dtype": "float16"}),
        "big": api.store({"op": "matmul", "m": 512, "n": 512, "k": 64}),
        "softmax": api.store({"op": "softmax", "rows": 97, "cols": 1000}),
        "gpu": api.store(api.matmul, device=api.gpu),
    }
    return ids


def test_kernels_are_filtered_and_paged(api: Any) -> None:
    ids = _fill(api)
    read = api.headers("read")
    everything = api.client.get("/v1/kernels", headers=read).json()
    assert everything["total"] == 5 and len(everything["items"]) == 5
    assert {k["id"] for k in api.client.get("/v1/kernels?op=matmul&dtype=float32", headers=read).json()["items"]} == {
        ids["f32"], ids["big"], ids["gpu"]}
    shaped = api.client.get("/v1/kernels?shape=m:512,k:64", headers=read).json()
    assert [k["id"] for k in shaped["items"]] == [ids["big"]]
    assert [k["id"] for k in api.client.get("/v1/kernels?arch=sm_90", headers=read).json()["items"]] == [ids["gpu"]]
    assert api.client.get("/v1/kernels?device=h100", headers=read).json()["items"][0]["target"] == "cuda"
    first = api.client.get("/v1/kernels?limit=2", headers=read).json()
    rest = api.client.get("/v1/kernels?limit=2&offset=2", headers=read).json()
    assert first["total"] == rest["total"] == 5 and len(first["items"]) == len(rest["items"]) == 2
    assert not {k["id"] for k in first["items"]} & {k["id"] for k in rest["items"]}
    assert api.client.get("/v1/kernels?shape=m=5", headers=read).status_code == 422
    assert api.client.get("/v1/kernels?device=%00x", headers=read).status_code == 422


def test_a_kernel_whole_with_its_binary(api: Any) -> None:
    kernel_id = api.store(api.matmul)
    kernel = api.client.get(f"/v1/kernels/{kernel_id}", headers=api.headers("read")).json()
    assert base64.b64decode(kernel["binary"]) == b"\x7fELF\x02\x01\x00"
    assert kernel["entry"] == "wm_matmul" and kernel["schedule"] == {"mc": 64, "nc": 96}
    assert kernel["toolchain"]["key"] == api.toolchain.key and kernel["gflops"] == 41.5 and kernel["program"] is None
    assert (kernel["latency_p20_ms"], kernel["latency_ms"], kernel["latency_p80_ms"], kernel["gbs"]) == (
        pytest.approx(0.012), 0.0125, pytest.approx(0.0135), 7.25)
    # 41.5 of a 415 GFLOP/s peak is a tenth; 7.25 of 58 GB/s an eighth: memory binds.
    assert (kernel["peak_gflops"], kernel["bandwidth_gbs"], kernel["bound"]) == (415.0, 58.0, "memory")
    assert kernel["roofline_fraction"] == pytest.approx(0.125)
    assert api.client.get("/v1/kernels/999999", headers=api.headers("read")).status_code == 404


def test_lookup_is_exact_unless_nearest_is_asked(api: Any) -> None:
    api.store(api.matmul)
    read = api.headers("read")
    exact = api.client.post("/v1/kernels/lookup", json={"operator": api.matmul, "target": "cpu"}, headers=read)
    assert exact.status_code == 200 and exact.json()["exact"] is True
    # A worker of the same arch under another driver: only a nearest lookup finds the kernel.
    other = api.cpu.__class__(name=api.cpu.name, arch=api.cpu.arch, driver="other", compute_units=2)
    api.db(stop_worker, name="cpu-0")
    api.register(name="cpu-1", device=other)
    missing = api.client.post("/v1/kernels/lookup", json={"operator": api.matmul}, headers=read)
    assert missing.status_code == 404 and "no cached kernel" in missing.json()["detail"]
    near = api.client.post("/v1/kernels/lookup", json={"operator": api.matmul, "nearest": True}, headers=read)
    assert near.status_code == 200 and near.json()["exact"] is False


def test_devices_list_every_worker_alive_or_not(api: Any) -> None:
    api.register(name="gpu-0", target="cuda:0", device=api.gpu)
    api.db(stop_worker, name="gpu-0")
    items = api.client.get("/v1/devices", headers=api.headers("read")).json()["items"]
    assert [(w["name"], w["alive"]) for w in items] == [("cpu-0", True), ("gpu-0", False)]
    assert items[1]["device"]["arch"] == "sm_90" and items[0]["queue"] == f"cpu:{api.cpu.arch}"


def test_readyz_needs_the_database_at_head_and_a_live_worker_per_target(make_api: Any) -> None:
    api = make_api(with_worker=False)
    unready = api.client.get("/readyz")
    assert unready.status_code == 503 and unready.json()["checks"]["workers"] == "no worker is registered"
    api.register()
    ready = api.client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {
        "status": "ready", "checks": {"database": "ok", "migrations": "ok", "workers": "ok"}}
    advertised = make_api(api_targets=("cpu", "cuda"))
    assert advertised.client.get("/readyz").json()["checks"]["workers"] == "no live worker for cuda"
    downgrade(api.url, "-1")
    behind = api.client.get("/readyz").json()
    assert behind["status"] == "unready" and "run `warpmap db upgrade`" in behind["checks"]["migrations"]
    assert api.client.get("/healthz").json() == {"status": "ok"}


def _sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.rsplit("} ", 1)[0]))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in the metrics")


def test_metrics_count_jobs_trials_hits_misses_and_latency(api: Any) -> None:
    api.store(api.matmul)
    tune = api.headers()
    assert api.client.post("/v1/tunings", json={"operator": api.matmul}, headers=tune).status_code == 200
    job = api.client.post("/v1/tunings", json={"operator": {**api.matmul, "m": 3}}, headers=tune).json()["tuning"]
    for number, status in enumerate(["ok", "ok", "timeout"]):
        api.db(record_trial, job_id=job["id"], trial=TrialResult(number=number, params={}, status=status))
    api.client.get(f"/v1/tunings/{job['id']}", headers=api.headers("read"))
    text = api.client.get("/metrics").text
    assert _sample(text, "warpmap_jobs", status="queued") == 1
    assert _sample(text, "warpmap_jobs", status="succeeded") == 0
    assert _sample(text, "warpmap_trials_total", status="ok") == 2
    assert _sample(text, "warpmap_trials_total", status="timeout") == 1
    assert _sample(text, "warpmap_cache_hits_total", endpoint="tunings") == 1
    assert _sample(text, "warpmap_cache_misses_total", endpoint="tunings") == 1
    assert _sample(text, "warpmap_workers", target="cpu", alive="true") == 1
    # Latency by route template, never by raw path.
    assert _sample(text, "warpmap_http_request_duration_seconds_count", route="/v1/tunings/{job_id}",
                   status="200") == 1
    assert f"/v1/tunings/{job['id']}\"" not in text
