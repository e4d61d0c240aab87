"""`warpmap serve` as a process on SQLite with no configuration: migrations applied, the host's executor
registered, a job left queued by an earlier run resumed and finished, SIGTERM a clean exit; `--workers 0`
serves the API alone. Runs once the API (``service.api.create_app``) is part of the build."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from db import create_engine_for, get_job, list_workers, session_scope, upgrade
from tests.service.jobs.conftest import REDUCE

pytest.importorskip("service.api", reason="the HTTP API slice (service.api.create_app) is not in this build")


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve(data: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    port = _port()
    env = {**os.environ, "XDG_DATA_HOME": str(data), "WARPMAP_WORKER_HEARTBEAT_S": "0.5"}
    env.pop("WARPMAP_DATABASE_URL", None)
    process = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(port), *extra], env=env,
                               stdout=subprocess.DEVNULL, stderr=(data / "serve.log").open("wb"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
                if answer.status == 200:
                    return process, port
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise AssertionError(f"serve did not answer /healthz: {(data / 'serve.log').read_text()[-2000:]}")


def _stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=60)


def test_serve_resumes_a_waiting_job_and_stops_cleanly(tmp_path: Path, submit: Callable) -> None:
    url = f"sqlite:///{tmp_path / 'warpmap' / 'warpmap.db'}"
    upgrade(url)
    engine = create_engine_for(url)
    try:
        job = submit(engine, REDUCE, trials=2)  # queued by an earlier service, never run
        process, _ = _serve(tmp_path)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                with session_scope(engine) as session:
                    status = get_job(session=session, job_id=job.id).status
                if status not in ("queued", "running"):
                    break
                time.sleep(0.2)
            with session_scope(engine) as session:
                (worker,) = list_workers(session=session)
            assert status == "succeeded" and worker.target == "cpu" and worker.alive
        finally:
            assert _stop(process) == 0
        with session_scope(engine) as session:
            (worker,) = list_workers(session=session)
        assert worker.stopped_at is not None
    finally:
        engine.dispose()


def test_serve_with_no_workers_leaves_jobs_queued(tmp_path: Path, submit: Callable) -> None:
    url = f"sqlite:///{tmp_path / 'warpmap' / 'warpmap.db'}"
    upgrade(url)
    engine = create_engine_for(url)
    try:
        job = submit(engine, REDUCE, trials=2)
        process, _ = _serve(tmp_path, "--workers", "0")
        try:
            time.sleep(1.0)
            with session_scope(engine) as session:
                assert get_job(session=session, job_id=job.id).status == "queued"
                assert list_workers(session=session) == []
        finally:
            assert _stop(process) == 0
    finally:
        engine.dispose()
