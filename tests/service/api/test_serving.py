"""The API as a server: real HTTP on loopback under uvicorn, reads beside a SQLite writer, and keys from the CLI."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy.engine import make_url

from db.repository import get_kernel
from service.cli import main
from tests.conftest import free_port


@pytest.fixture
def served(make_api: Any) -> Iterator[tuple[str, Any]]:
    """A new app under uvicorn on a loopback port, in a thread; ``(base URL, api helpers)``."""
    api = make_api()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(api.new_app(api_flush_s=0.1), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", api
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_real_http_on_loopback(served: tuple[str, Any]) -> None:
    base, api = served
    kernel_id = api.store(api.matmul)
    with httpx.Client(base_url=base, headers=api.headers(), timeout=30) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        hit = client.post("/v1/tunings", json={"operator": api.matmul, "target": "cpu"})
        assert hit.status_code == 200 and hit.json()["kernel"]["id"] == kernel_id
        miss = client.post("/v1/tunings?wait=0.2", json={"operator": {**api.matmul, "n": 7}})
        assert miss.status_code == 202 and miss.json()["tuning"]["status"] == "queued"
        assert client.get("/v1/kernels").json()["total"] == 1
        assert client.post("/v1/tunings", content=b"{" * 70000).status_code == 413
        assert "warpmap_cache_hits_total" in client.get("/metrics").text
        assert client.get("/openapi.json").json()["info"]["title"] == "warpmap"
    # The background task wrote the hit without any request asking.
    deadline = time.monotonic() + 10
    while api.db(get_kernel, kernel_id=kernel_id).hits != 1:
        assert time.monotonic() < deadline, "the counted hit was never written"
        time.sleep(0.05)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_reads_are_not_serialised_behind_a_writer(make_api: Any) -> None:
    api = make_api(sqlite_busy_timeout_s=3.0)
    api.store(api.matmul)
    writer = sqlite3.connect(make_url(api.url).database, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # holds the write lock, as a worker saving a kernel would
        start = time.monotonic()
        for _ in range(20):
            answer = api.client.post("/v1/tunings", json={"operator": api.matmul}, headers=api.headers())
            assert answer.status_code == 200 and answer.json()["cache"] == "hit"
        assert time.monotonic() - start < 3.0  # never waited out the busy timeout
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_keys_cli_prints_the_key_last_and_it_authenticates(make_api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    api = make_api()
    assert main(["keys", "create", "--scope", "tune", "--name", "ci", "--max-trials", "5",
                 "--database-url", api.url]) == 0
    token = capsys.readouterr().out.split()[-1]
    headers = {"Authorization": f"Bearer {token}"}
    over = api.client.post("/v1/tunings", json={"operator": api.matmul, "budget": {"trials": 6}}, headers=headers)
    assert over.status_code == 422
    assert api.client.post("/v1/tunings", json={"operator": api.matmul, "budget": {"trials": 5}},
                           headers=headers).status_code == 202
    assert main(["keys", "ls", "--database-url", api.url]) == 0
    listing = capsys.readouterr().out
    assert token not in listing and token[:10] in listing and "5 trials" in listing
    key_id = next(line.split()[0] for line in listing.splitlines() if line.endswith(" ci"))
    assert main(["keys", "revoke", key_id, "--database-url", api.url]) == 0
    assert api.client.get("/v1/devices", headers=headers).status_code == 401
    assert main(["keys", "revoke", "999", "--database-url", api.url]) == 2
    assert "no API key with id 999" in capsys.readouterr().err
    assert main(["keys", "create", "--scope", "read", "--max-trials", "0", "--database-url", api.url]) == 2

