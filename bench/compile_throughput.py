"""How many candidate kernels NVRTC builds per second: cold and warm cache, one process and a pool.

Usage::

    python bench/compile_throughput.py [--candidates 24] [--arch sm_80] [--workers N] [--source auto]

Candidates are distinct matmul kernels. ``--source example`` takes them from
``examples/efficient_matmul.py`` (one per problem size); ``--source template`` from the SIMT
tiled-matmul template below (one per tile configuration); ``auto`` prefers the example when it loads.

"cold" compiles every candidate into an empty cache; "warm" repeats the same builds, all cache hits.
Pool workers are started and primed (one uncached build each, paying the import and NVRTC's
first-compile cost) before the clock starts, as a long-lived tuning worker pool would be.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from compiler.backends.nvrtc import compile_source, nvrtc_version
from compiler.diskcache import DiskCache
from compiler.source import KernelSource, Param

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "efficient_matmul.py"

_TEMPLATE = """// SIMT tiled matmul: C[M, N] = A[M, K] @ B[K, N], row-major, float32.
extern "C" __global__ void __launch_bounds__({threads}) {entry}(
    const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c) {{
  constexpr int M = {m}, N = {n}, K = {k};
  constexpr int BM = {bm}, BN = {bn}, BK = {bk}, TM = {tm}, TN = {tn};
  constexpr int THREADS = {threads}, THREADS_N = BN / TN;
  __shared__ float a_tile[BK][BM];
  __shared__ float b_tile[BK][BN];
  const int tid = threadIdx.x;
  const int tile_row = (tid / THREADS_N) * TM, tile_col = (tid % THREADS_N) * TN;
  float acc[TM][TN] = {{}};
  for (int k0 = 0; k0 < K; k0 += BK) {{
    for (int i = tid; i < BM * BK; i += THREADS)
      a_tile[i % BK][i / BK] = a[(blockIdx.y * BM + i / BK) * K + k0 + i % BK];
    for (int i = tid; i < BK * BN; i += THREADS)
      b_tile[i / BN][i % BN] = b[(k0 + i / BN) * N + blockIdx.x * BN + i % BN];
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {{
      float a_frag[TM], b_frag[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a_frag[i] = a_tile[kk][tile_row + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) b_frag[j] = b_tile[kk][tile_col + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += a_frag[i] * b_frag[j];
    }}
    __syncthreads();
  }}
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
      c[(blockIdx.y * BM + tile_row + i) * N + blockIdx.x * BN + tile_col + j] = acc[i][j];
}}
"""

_MATMUL_PARAMS = (Param("a", "float32"), Param("b", "float32"), Param("c", "float32"))


def template_candidates(count: int) -> list[KernelSource]:
    """``count`` distinct tiled-matmul kernels: every tile configuration with 64–256 threads, then the
    same configurations again at larger K, until there are enough."""
    tiles = [
        (bm, bn, bk, tm, tn)
        for bm, bn, bk, tm, tn in itertools.product((32, 64, 128), (32, 64, 128), (8, 16), (4, 8), (4, 8))
        if 64 <= (bm // tm) * (bn // tn) <= 256
    ]
    kernels = []
    for index in range(count):
        bm, bn, bk, tm, tn = tiles[index % len(tiles)]
        m, n, k = 1024, 1024, 1024 + 256 * (index // len(tiles))
        threads = (bm // tm) * (bn // tn)
        entry = f"matmul_{bm}x{bn}x{bk}_t{tm}x{tn}_k{k}"
        text = _TEMPLATE.format(entry=entry, threads=threads, m=m, n=n, k=k, bm=bm, bn=bn, bk=bk, tm=tm, tn=tn)
        kernels.append(KernelSource(entry, text, (n // bn, m // bm, 1), (threads, 1, 1), _MATMUL_PARAMS))
    return kernels


def example_candidates(count: int) -> list[KernelSource]:
    """``count`` kernels from the example matmul, one per problem size (m, n, k vary)."""
    spec = importlib.util.spec_from_file_location("efficient_matmul", EXAMPLE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {EXAMPLE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sizes = itertools.islice(
        ((64 * i, 64 * j, 32 * k) for i, j, k in itertools.product(range(16, 32), repeat=3)), count
    )
    return [module.efficient_matmul_source(m, n, k) for m, n, k in sizes]


def load_candidates(source: str, count: int) -> tuple[str, list[KernelSource]]:
    if source in ("auto", "example"):
        try:
            return "examples/efficient_matmul.py", example_candidates(count)
        except Exception as exc:  # any failure of the example: fall back (auto) or stop (example)
            if source == "example":
                raise SystemExit(f"cannot use the example: {type(exc).__name__}: {exc}") from exc
            print(f"note: not using the example ({type(exc).__name__}: {exc})", file=sys.stderr)
    return "the SIMT tiled-matmul template", template_candidates(count)


@dataclass(frozen=True)
class Row:
    mode: str
    candidates: int
    seconds: float
    ok: int
    cached: int
    cpu_seconds: float

    @property
    def per_second(self) -> float:
        return self.candidates / self.seconds


def _build(job: tuple[KernelSource, str, DiskCache | None]) -> tuple[bool, bool, float]:
    """One build: (ok, cache hit, CPU seconds this process spent on it)."""
    source, arch, cache = job
    cpu = time.process_time()
    result = compile_source(source, arch, cache=cache)
    return result.ok, result.cached, time.process_time() - cpu


def _timed(mode: str, run: Callable[[], list[tuple[bool, bool, float]]], count: int) -> Row:
    start = time.perf_counter()
    results = run()
    seconds = time.perf_counter() - start
    ok, cached, cpu = (sum(column) for column in zip(*results, strict=True))
    return Row(mode, count, seconds, int(ok), int(cached), float(cpu))


def measure(candidates: Sequence[KernelSource], arch: str, workers: int, root: Path) -> tuple[list[Row], float]:
    """The four rows (cold/warm × one process/pool) and the pool's start-up seconds."""
    rows = []
    serial_cache = DiskCache(root / "serial", max_bytes=1 << 30)
    jobs = [(c, arch, serial_cache) for c in candidates]
    _build((_probe_kernel(), arch, None))  # pay import and first-compile cost outside the clock
    rows.append(_timed("cold cache, 1 process", lambda: [_build(j) for j in jobs], len(jobs)))
    rows.append(_timed("warm cache, 1 process", lambda: [_build(j) for j in jobs], len(jobs)))
    pool_cache = DiskCache(root / "pool", max_bytes=1 << 30)
    jobs = [(c, arch, pool_cache) for c in candidates]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        list(pool.map(_build, [(_probe_kernel(), arch, None)] * workers))
        startup = time.perf_counter() - start
        rows.append(_timed(f"cold cache, pool of {workers}", lambda: list(pool.map(_build, jobs)), len(jobs)))
        rows.append(_timed(f"warm cache, pool of {workers}", lambda: list(pool.map(_build, jobs)), len(jobs)))
    return rows, startup


_FIRST_COMPILE_PROBE = """
import json, sys, time
start = time.perf_counter()
from compiler.backends.nvrtc import compile_source
from compiler.source import KernelSource
imported = time.perf_counter()
times = []
for value in range(3):
    body = "{ out[threadIdx.x] = " + str(value) + "; }"
    text = 'extern "C" __global__ void probe(float* out) ' + body
    began = time.perf_counter()
    assert compile_source(KernelSource("probe", text, (1, 1, 1), (32, 1, 1), ()), sys.argv[1]).ok
    times.append(time.perf_counter() - began)
print(json.dumps([imported - start, *times]))
"""


def first_compile_costs(arch: str, runs: int = 5) -> list[float]:
    """Median seconds, over ``runs`` fresh interpreters, of: importing the NVRTC backend, the first
    build, the second and the third (three distinct small kernels)."""
    samples = []
    for _ in range(runs):
        completed = subprocess.run(
            [sys.executable, "-c", _FIRST_COMPILE_PROBE, arch], capture_output=True, text=True, check=True
        )
        samples.append(json.loads(completed.stdout))
    return [statistics.median(column) for column in zip(*samples, strict=True)]


def _probe_kernel() -> KernelSource:
    text = 'extern "C" __global__ void probe(float* out) { out[threadIdx.x] = 1.0f; }\n'
    return KernelSource("probe", text, (1, 1, 1), (32, 1, 1), (Param("out", "float32"),))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def format_rows(rows: Sequence[Row]) -> str:
    lines = [
        "| mode | candidates | seconds | candidates/s | CPU ms/candidate |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r.mode} | {r.candidates} | {r.seconds:.2f} | {r.per_second:.1f} "
        f"| {1000 * r.cpu_seconds / r.candidates:.1f} |"
        for r in rows
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=24)
    parser.add_argument("--arch", default="sm_80")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--source", choices=("auto", "example", "template"), default="auto")
    args = parser.parse_args(argv)
    if args.candidates < 1 or args.workers < 1:
        parser.error("--candidates and --workers must be positive")
    start = time.perf_counter()
    origin, candidates = load_candidates(args.source, args.candidates)
    generated = time.perf_counter() - start
    if len({c.source for c in candidates}) != len(candidates):
        raise SystemExit("the candidates are not distinct sources")
    with tempfile.TemporaryDirectory(prefix="warpmap-bench-") as scratch:
        rows, startup = measure(candidates, args.arch, args.workers, Path(scratch))
    major, minor = nvrtc_version()
    python, load = platform.python_version(), ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, {cpu_model()}; Python {python}; NVRTC {major}.{minor}")
    print(f"load average before the run: {load}")
    print(
        f"candidates: {len(candidates)} distinct kernels from {origin}, arch {args.arch} "
        f"(generating their sources took {generated:.2f} s, not counted below)"
    )
    print(f"pool start-up (spawn {args.workers} workers, one primed build each): {startup:.2f} s\n")
    print(format_rows(rows))
    imported, first, second, third = first_compile_costs(args.arch)
    print(
        f"\nfresh process (median of 5): import {1000 * imported:.0f} ms, first build {1000 * first:.0f} ms, "
        f"second {1000 * second:.0f} ms, third {1000 * third:.0f} ms (a one-line kernel)"
    )
    failed = [r for r in rows if r.ok != r.candidates]
    wrong_hits = [r for r in rows if r.cached != (r.candidates if r.mode.startswith("warm") else 0)]
    for row in failed:
        print(f"warning: {row.mode}: {row.candidates - row.ok} builds failed", file=sys.stderr)
    for row in wrong_hits:
        print(f"warning: {row.mode}: {row.cached} of {row.candidates} were cache hits", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
