"""Three kernels written for the cpu target: an elementwise map, a row sum, a register-tiled matmul.

Written in the kernel language like any GPU kernel, but host-first: blocks become OpenMP iterations and
a block's threads a serial loop (see ``compiler.codegen.cpp``), so each block gets a long contiguous
stretch of work and the innermost thread loop walks consecutive elements. No barriers, shared memory or
shuffles: the host dialect refuses them.

    >>> from compiler.codegen.cpp import render_host
    >>> "for (int k = 0; k < 5; ++k) {" in render_host(matmul(3, 4, 5)).source
    True
"""

from __future__ import annotations

from compiler.ir import (
    Kernel,
    assign,
    blockIdx,
    exp,
    f32,
    fma,
    if_,
    kernel,
    let,
    logical_and,
    lower,
    min_,
    range_,
    registers,
    threadIdx,
    var,
)

#: Threads per block of the elementwise map along columns and rows.
MAP_COLS, MAP_ROWS = 64, 4
#: Rows summed per block.
SUM_ROWS = 8
#: The matmul's micro-tile (rows x columns of C per thread) and threads per block along N.
TILE_M, TILE_N, THREADS_N = 2, 4, 16


def _blocks(extent: int, per_block: int) -> int:
    return -(-extent // per_block)


def elementwise(m: int, n: int) -> Kernel:
    """``out = alpha * x + exp(y)`` over an m x n grid, guarded at both edges."""
    with kernel("axpy_exp", block=(MAP_COLS, MAP_ROWS), grid=(_blocks(n, MAP_COLS), _blocks(m, MAP_ROWS))) as k:
        x = k.tensor("x", f32, (m, n), const=True)
        y = k.tensor("y", f32, (m, n), const=True)
        out = k.tensor("out", f32, (m, n))
        alpha = k.scalar("alpha", f32)
        row = let("row", blockIdx.y * MAP_ROWS + threadIdx.y)
        col = let("col", blockIdx.x * MAP_COLS + threadIdx.x)
        with if_(logical_and(row < m, col < n)):
            out[row, col] = alpha * x[row, col] + exp(y[row, col])
    return lower(k.kernel)


def row_sum(m: int, n: int) -> Kernel:
    """``out[r] = sum(x[r, :])``: one thread per row, a run-time loop over the columns."""
    with kernel("row_sum", block=SUM_ROWS, grid=_blocks(m, SUM_ROWS)) as k:
        x = k.tensor("x", f32, (m, n), const=True)
        out = k.tensor("out", f32, (m,))
        row = let("row", blockIdx.x * SUM_ROWS + threadIdx.x)
        with if_(row < m):
            total = var("total", f32, 0.0)
            for c in range_(n, name="c"):
                assign(total, total + x[row, c])
            out[row] = total
    return lower(k.kernel)


def matmul(m: int, n: int, kk: int) -> Kernel:
    """``c = a @ b`` (row-major): each thread owns a TILE_M x TILE_N tile of c in registers."""
    rows_per_block = TILE_M
    cols_per_block = TILE_N * THREADS_N
    grid = (_blocks(n, cols_per_block), _blocks(m, rows_per_block))
    with kernel("matmul", block=THREADS_N, grid=grid) as k:
        a = k.tensor("a", f32, (m, kk), const=True)
        b = k.tensor("b", f32, (kk, n), const=True)
        c = k.tensor("c", f32, (m, n))
        row0 = let("row0", blockIdx.y * rows_per_block)
        col0 = let("col0", blockIdx.x * cols_per_block + threadIdx.x * TILE_N)
        acc = registers("acc", f32, (TILE_M, TILE_N))
        for i in range_(TILE_M, name="i", unroll=True):
            for j in range_(TILE_N, name="j", unroll=True):
                acc[i, j] = 0.0
        for p in range_(kk, name="k"):
            for i in range_(TILE_M, name="i", unroll=True):
                # Edge tiles read a clamped (valid) row or column and never store it: no branch here.
                a_ip = let("a_ip", a[min_(row0 + i, m - 1), p])
                for j in range_(TILE_N, name="j", unroll=True, simd=True):
                    acc[i, j] = fma(a_ip, b[p, min_(col0 + j, n - 1)], acc[i, j])
        for i in range_(TILE_M, name="i", unroll=True):
            for j in range_(TILE_N, name="j", unroll=True):
                with if_(logical_and(row0 + i < m, col0 + j < n)):
                    c[row0 + i, col0 + j] = acc[i, j]
    return lower(k.kernel)
