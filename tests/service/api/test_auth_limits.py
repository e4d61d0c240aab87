"""Keys and scopes (401 and 403 say why), open reads, and the limits: body size, spec bounds, budgets."""

from __future__ import annotations

import json
from typing import Any

import pytest

from db.api_keys import find_api_key, list_api_keys, revoke_api_key


def test_no_key_unknown_key_and_malformed_header_are_401_saying_which(api: Any) -> None:
    missing = api.client.get("/v1/kernels")
    assert missing.status_code == 401 and "'read' scope" in missing.json()["detail"]
    assert missing.headers["www-authenticate"] == "Bearer"
    unknown = api.client.get("/v1/kernels", headers={"Authorization": "Bearer wm_not-a-key"})
    assert unknown.status_code == 401 and unknown.json()["detail"] == "unknown or revoked API key"
    basic = api.client.get("/v1/kernels", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert basic.status_code == 401 and "not 'Bearer <key>'" in basic.json()["detail"]


def test_a_key_without_the_scope_is_403_naming_it(api: Any) -> None:
    refused = api.client.post("/v1/tunings", json={"operator": api.matmul}, headers=api.headers("read"))
    assert refused.status_code == 403
    assert "lacks the 'tune' scope" in refused.json()["detail"] and "POST /v1/tunings" in refused.json()["detail"]
    assert api.client.get("/v1/kernels", headers=api.headers("read")).status_code == 200
    # Higher scopes imply lower ones.
    assert api.client.get("/v1/kernels", headers=api.headers("tune")).status_code == 200
    admin = api.client.post("/v1/tunings", json={"operator": api.matmul}, headers=api.headers("admin"))
    assert admin.status_code == 202


def test_a_revoked_key_stops_working(api: Any) -> None:
    assert api.client.get("/v1/devices", headers=api.headers("read")).status_code == 200
    key = api.db(find_api_key, token=api.keys["read"])
    api.db(revoke_api_key, key_id=key.id)
    assert api.client.get("/v1/devices", headers=api.headers("read")).status_code == 401


def test_key_uses_are_written_with_the_batch(api: Any) -> None:
    api.client.get("/v1/devices", headers=api.headers("read"))
    used = {k.name: k.last_used_at for k in api.db(list_api_keys)}
    assert used["read test key"] is None  # not on the request path
    api.client.portal.call(api.client.app.state.api.flush)
    used = {k.name: k.last_used_at for k in api.db(list_api_keys)}
    assert used["read test key"] is not None and used["tune test key"] is None


def test_open_reads_serve_reads_without_a_key_but_never_writes(make_api: Any) -> None:
    api = make_api(api_open_reads=True)
    assert api.client.get("/v1/kernels").status_code == 200
    assert api.client.get("/v1/devices").status_code == 200
    assert api.client.post("/v1/tunings", json={"operator": api.matmul}).status_code == 401
    assert api.client.delete("/v1/tunings/1").status_code == 401


def _locs(answer: Any) -> list[list[Any]]:
    assert answer.status_code == 422, answer.text
    return [error["loc"] for error in answer.json()["detail"]]


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        ({"operator": {"op": "matmul", "m": 0, "n": 4, "k": 4}}, ["body", "operator", "matmul", "m"]),
        ({"operator": {"op": "matmul", "m": 4, "n": 4, "k": True}}, ["body", "operator", "matmul", "k"]),
        ({"operator": {"op": "matmul", "m": 4, "n": 4, "k": 4, "code": "import os"}},
         ["body", "operator", "matmul", "code"]),
        ({"operator": {"op": "nope", "m": 4}}, ["body", "operator"]),
        ({"target": "rocm"}, ["body", "target"]),
        ({"target": "cuda"}, ["body", "target"]),  # no GPU worker is registered
        ({"strategy": "__import__('os')"}, ["body", "strategy"]),
        ({"budget": {"trials": 0}}, ["body", "budget", "trials"]),
        ({"budget": {"trials": 5000}}, ["body", "budget", "trials"]),
        ({"budget": {"trials": 10, "seconds": 10**9}}, ["body", "budget", "seconds"]),
        ({"budget": {"trials": 10, "patience": 11}}, ["body", "budget", "patience"]),
        ({"level": 7}, ["body", "level"]),
        ({"operator": {"op": "matmul", "m": 65536, "n": 65536, "k": 65536}}, ["body", "operator"]),
    ],
)
def test_bad_requests_are_422_naming_the_field(api: Any, change: dict[str, Any], loc: list[Any]) -> None:
    body = {"operator": api.matmul, "target": "cpu", **change}
    locs = _locs(api.client.post("/v1/tunings", json=body, headers=api.headers()))
    assert loc in locs or any(found[: len(loc)] == loc for found in locs), locs
    assert api.dispatcher.enqueued == []


def test_a_keys_own_budget_limits_apply(api: Any) -> None:
    headers = {"Authorization": f"Bearer {api.keys['limited']}"}
    over = api.client.post("/v1/tunings", json={"operator": api.matmul, "budget": {"trials": 11}}, headers=headers)
    assert _locs(over) == [["body", "budget", "trials"]] and "at most 10 trials" in over.text
    slow = api.client.post("/v1/tunings", json={"operator": api.matmul, "budget": {"trials": 5, "seconds": 61}},
                           headers=headers)
    assert _locs(slow) == [["body", "budget", "seconds"]]
    fine = api.client.post("/v1/tunings", json={"operator": api.matmul, "budget": {"trials": 10}}, headers=headers)
    assert fine.status_code == 202 and fine.json()["tuning"]["budget"]["seconds"] == 60.0


def test_an_unknown_query_parameter_is_422_naming_it(api: Any) -> None:
    answer = api.client.get("/v1/kernels?limt=5", headers=api.headers("read"))
    assert _locs(answer) == [["query", "limt"]] and "limit" in answer.json()["detail"][0]["msg"]
    assert api.client.get("/v1/kernels?limit=5", headers=api.headers("read")).status_code == 200


def test_wait_beyond_the_limit_is_422(make_api: Any) -> None:
    api = make_api(api_max_wait_s=5.0)
    assert _locs(api.client.post("/v1/tunings?wait=6", json={"operator": api.matmul}, headers=api.headers())) == [
        ["query", "wait"]]


def test_bodies_over_the_limit_are_413_declared_or_streamed(make_api: Any) -> None:
    api = make_api(api_max_body_bytes=2048)
    padded = {"operator": api.matmul, "pad": "x" * 4000}
    declared = api.client.post("/v1/tunings", json=padded, headers=api.headers())
    assert declared.status_code == 413 and "2,048 bytes" in declared.json()["detail"]

    def chunks() -> Any:
        for _ in range(5):
            yield b" " * 1000

    streamed = api.client.post("/v1/tunings", content=chunks(), headers={**api.headers(),
                                                                          "Content-Type": "application/json"})
    assert streamed.status_code == 413
    # Just under the limit, the body is read and validated as usual.
    small = api.client.post("/v1/tunings", json={"operator": api.matmul, "pad": "x"}, headers=api.headers())
    assert _locs(small) == [["body", "pad"]]


def test_a_body_not_sent_as_json_is_415_naming_the_header(api: Any) -> None:
    body = json.dumps({"operator": api.matmul, "target": "cpu"})
    for path in ("/v1/tunings", "/v1/kernels/lookup"):
        # What `curl -d '{...}'` sends: the JSON text as a form.
        form = api.client.post(path, content=body, headers={**api.headers(), "Content-Type":
                                                            "application/x-www-form-urlencoded"})
        assert form.status_code == 415, form.text
        assert "Content-Type: application/json" in form.json()["detail"] and "x-www-form-urlencoded" in form.text
        bare = api.client.post(path, content=body, headers=api.headers())
        assert bare.status_code == 415 and "(got no type)" in bare.json()["detail"]
    # JSON that is not an object is still a 422 of the body, and a JSON body is read as before.
    listed = api.client.post("/v1/tunings", json=[1, 2], headers=api.headers())
    assert listed.status_code == 422 and _locs(listed) == [["body"]]
    typed = api.client.post("/v1/tunings", content=body, headers={**api.headers(),
                                                                   "Content-Type": "application/json; charset=utf-8"})
    assert typed.status_code == 202 and api.dispatcher.enqueued
