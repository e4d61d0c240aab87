"""The HTTP example end to end over a real loopback socket: a small HTTP server answers as the API does
(the in-test service of tests/service/test_client.py, serving a real cpu build), the example tunes, loads
and runs the kernel, and prints its error against numpy and the latency."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _module("tune_over_http_example", ROOT / "examples" / "tune_over_http.py")
client_tests = _module("client_tests_service", ROOT / "tests" / "service" / "test_client.py")


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    service = client_tests.Service(client_tests._kernel_json(example.SPEC, 3, client_tests.host_arch()), polls=2)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            request = httpx.Request(self.command, f"http://test{self.path}", headers=dict(self.headers), content=body)
            response = service(request)
            self.send_response(response.status_code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(response.content)))
            self.end_headers()
            self.wfile.write(response.content)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_example_tunes_over_http_and_checks_the_kernel_against_numpy(url, capsys) -> None:
    assert example.main(["--url", url, "--api-key", client_tests.KEY, "--trials", "5"]) == 0
    out = capsys.readouterr().out
    assert "kernel 3 (cpu_matmul)" in out
    error = float(out.split("relative error against numpy: ")[1].split()[0])
    assert error <= 1e-5
    assert "latency here: " in out and " ms (median; numpy's matmul: " in out


def test_a_refused_request_is_one_line_and_exit_1(url, capsys) -> None:
    assert example.main(["--url", url, "--api-key", "wrong"]) == 1
    assert capsys.readouterr().err.strip() == ("tune_over_http: POST /v1/tunings: 401 no API key: "
                                               "send Authorization: Bearer <key>")


def _cli_commands() -> set[str]:
    import argparse

    from service.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


@pytest.mark.slow
@pytest.mark.skipif(not {"serve", "keys"} <= _cli_commands(),
                    reason="`warpmap serve` and `warpmap keys` come with the API and job engine branches")
def test_the_example_against_a_real_embedded_service(tmp_path) -> None:
    """`warpmap serve` as the README starts it (SQLite, the cpu executor in process), a key from `warpmap
    keys create`, then the example twice: a tuning, then a cache hit."""
    import os
    import subprocess
    import sys
    import time

    from tests.conftest import free_port, stop_process

    warpmap = str(Path(sys.executable).with_name("warpmap"))
    env = {**os.environ, "WARPMAP_DATABASE_URL": f"sqlite:///{tmp_path / 'warpmap.db'}",
           "WARPMAP_CACHE_DIR": str(tmp_path / "cache")}
    subprocess.run([warpmap, "db", "upgrade"], env=env, check=True, capture_output=True, timeout=300)
    created = subprocess.run([warpmap, "keys", "create", "--scope", "tune"], env=env, check=True, capture_output=True,
                             text=True, timeout=120)
    key = created.stdout.split()[-1]
    port = free_port()
    server = subprocess.Popen([warpmap, "serve", "--host", "127.0.0.1", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, "warpmap serve exited"
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "warpmap serve did not answer /healthz within 60 s"
            time.sleep(0.5)
        for _ in range(2):  # the second run is answered from the cache
            proc = subprocess.run([sys.executable, str(ROOT / "examples" / "tune_over_http.py"), "--url", url,
                                   "--api-key", key, "--trials", "3"], env=env, capture_output=True, text=True,
                                  timeout=600, check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "relative error against numpy: " in proc.stdout
            # The worker measured the roofs on its cores; the cache keeps them for the second answer.
            assert "% of its roofline (" in proc.stdout and "-bound)" in proc.stdout
    finally:
        stop_process(server)
