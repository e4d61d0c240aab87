"""Efficient SIMT matrix multiplication, C = A @ B in float32, written with task mappings.

The kernel of Hidet's "more efficient matmul" gallery example: a block of 4 x 2 warps computes a
64 x 256 tile of C. Each warp owns 16 x 128 of it, covered 2 x 2 times by an 8 x 64 footprint: its
lanes form a 2 x 16 grid and each lane computes 4 x 4 elements per repeat (8 x 8 accumulators).
The K dimension advances 8 at a time through two shared-memory buffers: while the block multiplies
one tile, every thread has already fetched its share of the next tile into registers, and stores it
into the other buffer afterwards, so a single barrier per step suffices. Edges of any M, N, K are predicated.

Run it to see the schedule, the resources NVRTC reports for sm_80 and sm_90 and a check of its result
against numpy on the CPU emulator, ending with the verdict (exit status 1 when it fails); ``--source``
also prints the generated CUDA.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from compiler.backends import emu
from compiler.backends.nvrtc import DEFAULT_ARCHS, compile_source, nvrtc_version
from compiler.codegen import render_cuda
from compiler.ir import (
    Expr,
    Kernel,
    blockIdx,
    f32,
    if_,
    kernel,
    logical_and,
    lower,
    range_,
    select,
    shared,
    sync_threads,
    task_registers,
    threadIdx,
)
from compiler.mapping import auto_map, spatial
from compiler.numeric import TOLERANCE, relative_error
from compiler.source import KernelSource
from service.cli.table import print_table

WARPS_M, WARPS_N = 4, 2  # warps per block
WARP_REPEAT_M, WARP_REPEAT_N = 2, 2  # each warp covers its footprint 2 x 2 times
LANES_M, LANES_N = 2, 16  # the 32 lanes of a warp as a 2 x 16 grid
THREAD_M, THREAD_N = 4, 4  # elements per lane and repeat

BLOCK_M = WARPS_M * WARP_REPEAT_M * LANES_M * THREAD_M  # 64
BLOCK_N = WARPS_N * WARP_REPEAT_N * LANES_N * THREAD_N  # 256
BLOCK_K = 8
NUM_THREADS = WARPS_M * WARPS_N * 32  # 256

#: Which elements of the block's C tile each thread accumulates.
MMA_MAPPING = (
    spatial(WARPS_M, WARPS_N)
    .repeat(WARP_REPEAT_M, WARP_REPEAT_N)
    .spatial(LANES_M, LANES_N)
    .repeat(THREAD_M, THREAD_N, attrs="u")
)
#: Which elements of the A and B tiles each thread fetches from global memory.
LOAD_A = auto_map(BLOCK_M, BLOCK_K, workers=NUM_THREADS)  # repeat(2, 1).spatial(32, 8)
LOAD_B = auto_map(BLOCK_K, BLOCK_N, workers=NUM_THREADS)  # repeat(8, 1).spatial(1, 256)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def efficient_matmul(m: int, n: int, k: int) -> Kernel:
    """The kernel IR computing ``c[m, n] = a[m, k] @ b[k, n]`` (row-major float32)."""
    for name, size in (("m", m), ("n", n), ("k", k)):
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"matmul size {name} must be a positive int, got {size!r}")
    num_k_tiles = _cdiv(k, BLOCK_K)
    grid = (_cdiv(m, BLOCK_M), _cdiv(n, BLOCK_N))
    with kernel("efficient_matmul", block=NUM_THREADS, grid=grid) as builder:
        a = builder.tensor("a", f32, (m, k), const=True)
        b = builder.tensor("b", f32, (k, n), const=True)
        c = builder.tensor("c", f32, (m, n))
        smem_a = shared("smem_a", f32, (2, BLOCK_M, BLOCK_K))
        smem_b = shared("smem_b", f32, (2, BLOCK_K, BLOCK_N))
        regs_a = task_registers("regs_a", f32, LOAD_A)  # this thread's share of the next A tile
        regs_b = task_registers("regs_b", f32, LOAD_B)
        regs_c = task_registers("regs_c", f32, MMA_MAPPING)  # its 8 x 8 accumulators

        def fetch_tiles(k_tile: Expr | int) -> None:
            """Global -> registers: this thread's share of the tiles at ``k_tile``, zero past the edges."""
            for i, kk in LOAD_A.on(threadIdx.x):
                row, col = blockIdx.x * BLOCK_M + i, k_tile * BLOCK_K + kk
                regs_a[i, kk] = select(logical_and(row < m, col < k), a[row, col], 0.0)
            for kk, j in LOAD_B.on(threadIdx.x):
                row, col = k_tile * BLOCK_K + kk, blockIdx.y * BLOCK_N + j
                regs_b[kk, j] = select(logical_and(row < k, col < n), b[row, col], 0.0)

        def store_tiles(buffer: Expr | int) -> None:
            """Registers -> shared buffer ``buffer``."""
            for i, kk in LOAD_A.on(threadIdx.x):
                smem_a[buffer, i, kk] = regs_a[i, kk]
            for kk, j in LOAD_B.on(threadIdx.x):
                smem_b[buffer, kk, j] = regs_b[kk, j]

        for i, j in MMA_MAPPING.on(threadIdx.x):
            regs_c[i, j] = 0.0

        fetch_tiles(0)
        store_tiles(0)
        sync_threads()
        for k_tile in range_(num_k_tiles, name="k_tile"):
            buffer = k_tile % 2
            with if_(k_tile + 1 < num_k_tiles):
                fetch_tiles(k_tile + 1)  # in flight while the block multiplies the current tile
            for kk in range_(BLOCK_K, name="kk", unroll=True):
                for i, j in MMA_MAPPING.on(threadIdx.x):
                    regs_c[i, j] += smem_a[buffer, i, kk] * smem_b[buffer, kk, j]
            with if_(k_tile + 1 < num_k_tiles):
                store_tiles(1 - buffer)  # the other buffer: last read before the previous barrier
            sync_threads()

        for i, j in MMA_MAPPING.on(threadIdx.x):
            row, col = blockIdx.x * BLOCK_M + i, blockIdx.y * BLOCK_N + j
            with if_(logical_and(row < m, col < n)):
                c[row, col] = regs_c[i, j]
    return builder.kernel


def efficient_matmul_source(m: int, n: int, k: int) -> KernelSource:
    """The lowered kernel rendered to CUDA, with its launch configuration."""
    return render_cuda(lower(efficient_matmul(m, n, k)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build, compile and verify the efficient matmul example.")
    parser.add_argument("--size", type=int, nargs=3, default=(256, 256, 256), metavar=("M", "N", "K"))
    parser.add_argument("--source", action="store_true", help="also print the generated CUDA source")
    args = parser.parse_args(argv)
    m, n, k = args.size
    try:
        source = efficient_matmul_source(m, n, k)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"efficient matmul, float32 C[{m}, {n}] = A[{m}, {k}] @ B[{k}, {n}]: kernel {source.entry}, "
          f"grid {source.grid}, block {source.block}")
    print(f"schedule: {BLOCK_M} x {BLOCK_N} tile of C per block, K in steps of {BLOCK_K} through two shared "
          f"buffers;\n  threads -> C tile: {MMA_MAPPING}\n  threads -> A tile: {LOAD_A!r}, B tile: {LOAD_B!r}")
    rows: list[list[object]] = []
    built = True
    for arch in DEFAULT_ARCHS:
        result = compile_source(source, arch)
        if not result.ok or result.usage is None:
            built = False
            rows.append([arch, "failed", "-", "-", "-", "-", result.error.message if result.error else ""])
            continue
        usage = result.usage
        rows.append([arch, "ok", usage.registers, usage.shared_bytes, usage.spill_stores, usage.spill_loads,
                     round(result.compile_ms)])
    print(f"\nresources (NVRTC {'.'.join(map(str, nvrtc_version()))}):")
    print_table(["arch", "build", "registers", "smem B", "spill st B", "spill ld B", "compile ms"], rows)

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, dtype=np.float32)
    stats = emu.run(source, [a, b, c])
    error = relative_error(c.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64))
    passed = built and error <= TOLERANCE["float32"]
    print(f"\nemulator: ran in {stats.kernel_s * 1e3:.1f} ms; relative error vs numpy {error:.2e} "
          f"(tolerance {TOLERANCE['float32']:.0e})")
    if args.source:
        print(f"\n{source.source.rstrip()}\n")
    reason = "" if passed else (" (an NVRTC build failed)" if not built else " (result differs from numpy)")
    print(f"verdict: {'pass' if passed else 'FAIL'}{reason}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
