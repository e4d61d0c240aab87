"""Fixtures of the service's process-level tests: `warpmap` commands run as real processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

#: Fast heartbeats so a dead worker is noticed in seconds, not the production half-minute.
WORKER_ENV = {
    "WARPMAP_WORKER_HEARTBEAT_S": "0.5",
    "WARPMAP_WORKER_STALLED_AFTER_S": "3",
    "WARPMAP_WORKER_STALLED_CHECK_S": "0.5",
    "WARPMAP_WORKER_POLL_S": "0.5",
}


@pytest.fixture
def warpmap_process(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """``start(name, *warpmap_args)``: a `warpmap` process (with the fast worker heartbeats) in its own
    session, killed with its children at the end; its output is printed then, for a failing run."""
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"{name}.log").open("wb")
        process = subprocess.Popen([sys.executable, "-m", "service.cli", *args], env={**os.environ, **WORKER_ENV},
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(process)
        return process

    yield start
    for process in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    for log in tmp_path.glob("*.log"):
        print(f"--- {log.name}\n{log.read_text()[-3000:]}")
