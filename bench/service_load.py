"""Cache-hit lookups under load: 50 concurrent clients on loopback against the API under uvicorn.

For each database (SQLite, and a throwaway PostgreSQL server started with initdb in a temporary
folder) and each uvicorn process count, the bench migrates a fresh database, registers a cpu worker,
stores a kernel and creates a read key; starts ``uvicorn --workers N`` on a free loopback port; then
``--clients`` asyncio clients (httpx, one connection each) send ``POST /v1/kernels/lookup`` for that
kernel back to back for ``--seconds`` after a warm-up. Every answer must be a 200 with the kernel.
The table gives requests per second, the median and p99 latency as the clients saw them, and errors.
The load generator runs on the same machine, so its CPU time comes out of the server's; and on a
shared machine the wall-clock figures move with everyone else's load. So the bench also counts CPU
time per answered request, of the uvicorn processes, of the PostgreSQL server and of the clients
(from /proc and getrusage, warm-up included); ``2-core est req/s`` is 2 CPU-seconds a second over
their sum: what two otherwise idle cores could serve with this client, an estimate, not a measurement.

``--generator ab`` drives the same requests with ApacheBench (``ab -k``, from apache2-utils; one C
process, about a tenth of httpx's CPU per request), so the two cores go to the service rather than to
the load generator; its p50 and p99 are ab's own percentiles over the measured run.

Usage: ``python bench/service_load.py [--backend sqlite|postgresql|both] [--workers 1,2] [--clients 50]
[--seconds 10] [--endpoint lookup|tunings|healthz] [--hit-cache 1,0] [--stack h11,uvloop]
[--generator httpx|ab]``.
``--hit-cache`` sets ``api_hit_cache_s``: with 0 every lookup is a database query in the thread pool;
with the default 1 s a hot kernel is read once a second per process. ``--endpoint healthz`` gives the
ceiling of this client and server on the machine at the time, with no database.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx

from db.api_keys import create_api_key
from db.migrate import upgrade
from db.records import DeviceInfo, KernelResult, ToolchainInfo, WorkloadSpec
from db.repository import save_kernel
from db.session import create_engine_for, session_scope
from db.workers import register_worker
from service.cli.table import format_table

SPEC = {"op": "matmul", "m": 512, "n": 512, "k": 512}
DEVICE = DeviceInfo(name="bench cpu", arch="cpu-f32x16-bench", driver="none", compute_units=2)
TOOLCHAIN = ToolchainInfo(warpmap="bench", nvrtc="none", host_compiler="g++ bench")
#: uvicorn's event loop and HTTP parser: the pure-Python pair, and uvloop + httptools when installed.
STACKS = {"h11": ["--loop", "asyncio", "--http", "h11"], "uvloop": ["--loop", "uvloop", "--http", "httptools"]}


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and all its descendants, from /proc; 0 for one that is gone."""
    total = 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (OSError, IndexError, ValueError):
        return total
    return total + sum(tree_cpu_s(int(child)) for child in children)


def own_cpu_s() -> float:
    """CPU seconds of this process and its ended children (the ab runs; a server is counted from /proc)."""
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def postgres() -> Iterator[tuple[str, Path]]:
    """A throwaway PostgreSQL server (initdb into a new folder, removed after); its URL.

    Under root the server runs as the postgres account, so its folder is its own and directly in the
    system's temporary folder (not under one only root can enter).
    """
    root = Path(tempfile.mkdtemp(prefix="warpmap-load-pg-"))
    bin_dir = next((Path(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), None)
    initdb = shutil.which("initdb") or (str(bin_dir / "initdb") if bin_dir else None)
    if initdb is None:
        raise SystemExit("no PostgreSQL binaries (initdb, pg_ctl) found")
    pg_ctl = str(Path(initdb).parent / "pg_ctl")
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data, port = root / "data", free_port()
    subprocess.run([*as_owner, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"],
                   check=True, capture_output=True)
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off -c max_connections=200"
    subprocess.run([*as_owner, pg_ctl, "-D", str(data), "-l", str(root / "log"), "-o", options, "-w", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres", data / "postmaster.pid"
    finally:
        subprocess.run([*as_owner, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def seed(url: str) -> str:
    """Migrate, register a cpu worker, store the kernel; a read key's token."""
    upgrade(url)
    engine = create_engine_for(url)
    try:
        with session_scope(engine) as session:
            register_worker(session=session, name="bench-cpu", target="cpu", queue="cpu:bench", device=DEVICE,
                            toolchain=TOOLCHAIN, host="localhost", pid=os.getpid())
            result = KernelResult(schedule={"mc": 128, "nc": 256}, source="// bench kernel\n" * 40, entry="wm_mm",
                                  grid=(1, 1, 1), block=(1, 1, 1), shared_bytes=0,
                                  params=({"name": "a", "dtype": "float32", "pointer": True},),
                                  latency_us=400.0, trials_used=40, binary=b"\0" * 4096, gflops=670.0)
            save_kernel(session=session, workload=WorkloadSpec(op="matmul", spec={
                **SPEC, "batch": 1, "dtype": "float32", "layout_a": "row", "layout_b": "row"}),
                device=DEVICE, toolchain=TOOLCHAIN, result=result)
            token, _ = create_api_key(session=session, name="bench", scopes=["read", "tune"])
    finally:
        engine.dispose()
    return token


@contextlib.contextmanager
def server(url: str, workers: int, folder: Path, hit_cache_s: float, stack: str) -> Iterator[tuple[str, int]]:
    port = free_port()
    env = {**os.environ, "WARPMAP_DATABASE_URL": url, "WARPMAP_MIGRATE_ON_START": "false",
           "WARPMAP_API_WORKER_CACHE_S": "5", "WARPMAP_API_HIT_CACHE_S": str(hit_cache_s)}
    command = [sys.executable, "-m", "uvicorn", "--factory", "service_load_app:app", "--app-dir",
               str(Path(__file__).parent), "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
               "--log-level", "warning", "--no-access-log",
               *STACKS[stack]]
    log = (folder / f"uvicorn-{port}.log").open("w")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"uvicorn did not start: {(folder / f'uvicorn-{port}.log').read_text()}")
            time.sleep(0.1)
        yield base, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


PATHS = {"lookup": "/v1/kernels/lookup", "tunings": "/v1/tunings", "healthz": "/healthz"}


def load_ab(base: str, token: str, clients: int, seconds: float, warmup_s: float, endpoint: str,
            folder: Path) -> tuple[int, float, float, float, int]:
    """``(requests, elapsed_s, p50_s, p99_s, errors)`` of an ``ab -k`` run after an ``ab`` warm-up run."""
    body = folder / "body.json"
    body.write_text(json.dumps({"operator": SPEC, "target": "cpu"}))
    percentiles = folder / "percentiles.csv"

    def ab(duration: float) -> str:
        command = ["ab", "-q", "-k", "-c", str(clients), "-t", f"{duration:g}", "-n", "100000000", "-s", "30",
                   "-H", f"Authorization: Bearer {token}", "-e", str(percentiles)]
        if endpoint != "healthz":
            command += ["-p", str(body), "-T", "application/json"]
        done = subprocess.run([*command, base + PATHS[endpoint]], capture_output=True, text=True, timeout=duration + 60,
                              check=True)
        return done.stdout

    ab(warmup_s)
    out = ab(seconds)
    field = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in out.splitlines() if ":" in line}
    complete = int(field["Complete requests"])
    # ab counts an answer whose length differs from the first as failed ("Length"); a kernel's hit count
    # and times change its length, so only connection, receive and exception failures, and non-2xx
    # answers, are errors here.
    breakdown = re.search(r"Connect: (\d+), Receive: (\d+), Length: \d+, Exceptions: (\d+)", out)
    errors = sum(int(g) for g in breakdown.groups()) if breakdown else int(field["Failed requests"])
    errors += int(field.get("Non-2xx responses", "0"))
    elapsed = float(field["Time taken for tests"].split()[0])
    within = {int(float(row.split(",")[0])): float(row.split(",")[1])
              for row in percentiles.read_text().splitlines()[1:]}
    return complete, elapsed, within[50] / 1e3, within[99] / 1e3, errors


async def load(base: str, token: str, clients: int, seconds: float, warmup_s: float, endpoint: str
               ) -> tuple[int, float, float, float, int]:
    """``(requests, elapsed_s, p50_s, p99_s, errors)`` measured after the warm-up."""
    path = PATHS[endpoint]
    body = {"operator": SPEC, "target": "cpu"}
    latencies: list[float] = []
    errors = 0
    start = time.perf_counter()
    measure_from, stop_at = start + warmup_s, start + warmup_s + seconds

    async def client() -> None:
        nonlocal errors
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"},
                                     timeout=30) as http:
            while (now := time.perf_counter()) < stop_at:
                answer = await (http.get(path) if endpoint == "healthz" else http.post(path, json=body))
                done = time.perf_counter()
                if now >= measure_from:
                    if answer.status_code != 200:
                        errors += 1
                    latencies.append(done - now)

    await asyncio.gather(*(client() for _ in range(clients)))
    return len(latencies), seconds, statistics.median(latencies), percentile(latencies, 0.99), errors


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--workers", default="1,2", help="uvicorn process counts, comma-separated (default 1,2)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--endpoint", choices=("lookup", "tunings", "healthz"), default="lookup",
                        help="healthz: the ceiling of this client and server on this machine, no database")
    parser.add_argument("--stack", default="h11", help="uvicorn's event loop and HTTP parser, comma-separated: h11 "
                        "(asyncio + h11, what `pip install warpmap` brings) and/or uvloop (uvloop + httptools, "
                        "installed separately)")
    parser.add_argument("--hit-cache", default="1,0",
                        help="api_hit_cache_s values to run, comma-separated (default 1,0: the service's default, "
                             "then every lookup read from the database)")
    parser.add_argument("--generator", choices=("httpx", "ab"), default="httpx",
                        help="the load generator: httpx asyncio clients in this process, or ApacheBench (ab -k)")
    args = parser.parse_args()
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="warpmap-load-") as scratch:
        folder = Path(scratch)
        for backend in backends:
            with contextlib.ExitStack() as stack:
                postmaster: Path | None = None
                if backend == "sqlite":
                    url = f"sqlite:///{folder / 'bench.db'}"
                else:
                    url, postmaster = stack.enter_context(postgres())
                db_pid = int(postmaster.read_text().split()[0]) if postmaster else None
                token = seed(url)
                for server_stack, hit_cache_s, workers in itertools.product(
                        args.stack.split(","), [float(h) for h in args.hit_cache.split(",")],
                        [int(w) for w in args.workers.split(",")]):
                    with server(url, workers, folder, hit_cache_s, server_stack) as (base, pid):
                        before = (tree_cpu_s(pid), tree_cpu_s(db_pid) if db_pid else 0.0, own_cpu_s())
                        if args.generator == "ab":
                            n, elapsed, p50, p99, errors = load_ab(base, token, args.clients, args.seconds,
                                                                   args.warmup, args.endpoint, folder)
                        else:
                            n, elapsed, p50, p99, errors = asyncio.run(
                                load(base, token, args.clients, args.seconds, args.warmup, args.endpoint))
                        after = (tree_cpu_s(pid), tree_cpu_s(db_pid) if db_pid else 0.0, own_cpu_s())
                    # The whole run's CPU (warm-up too) over every request it answered.
                    answered = n * (args.seconds + args.warmup) / args.seconds
                    cpu_ms = [round((a - b) / answered * 1e3, 2) for a, b in zip(after, before, strict=True)]
                    rows.append([backend, server_stack, f"{hit_cache_s:g}", workers, args.clients, n,
                                 round(n / elapsed),
                                 round(p50 * 1e3, 1), round(p99 * 1e3, 1), errors, *cpu_ms,
                                 round(2000 / sum(cpu_ms))])
    load_average = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load average {load_average}, "
          f"{args.endpoint} (cache hits), load from {args.generator}, "
          f"{args.seconds:g} s after {args.warmup:g} s warm-up")
    header = ["database", "stack", "hit cache s", "uvicorn workers", "clients", "requests", "req/s", "p50 ms",
              "p99 ms", "errors", "server cpu ms/req", "db cpu ms/req", "client cpu ms/req", "2-core est req/s"]
    print(format_table(header, rows))


if __name__ == "__main__":
    main()
