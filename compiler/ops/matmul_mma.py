"""Tensor-core matmul template (f16 and bf16 in, f32 accumulate, C in the input dtype), and its space.

Block ``blockIdx.x`` of batch ``blockIdx.z`` computes the ``block_m x block_n`` tile of C at row tile
``blockIdx.x % row_tiles`` and column tile ``blockIdx.x / row_tiles`` with
:func:`compiler.ops.gemm_mma.mma_mainloop` (one linear grid dimension: gridDim.y would cap the
column tiles at 65535). Each operand is copied in the layout it has in global memory (row-major A and
column-major B are k-contiguous), so every copy is a contiguous run; the mainloop's ldmatrix (plain
or ``.trans``) turns either into mma fragments.

Copy width: 16-byte ``cp.async`` needs every row start 16-byte aligned, so the build picks the widest of
8, 4, 2 elements that divides the contiguous extent (k for row-major A, m for column-major A, and so on)
and falls back to element loads when that extent is odd. Edges of any M, N, K are zero-filled.

Split-k is not offered: with C in f16/bf16, partial sums would need an f32 workspace and a second
kernel, and the operator contract builds one kernel per schedule.
"""

from __future__ import annotations

from typing import Any

from compiler.device import DeviceSpec
from compiler.ir import Buffer, Expr, blockIdx, cast, floats_to_pair, if_, kernel, let, logical_and, lower, select
from compiler.ir.types import DataType, bf16, f16
from compiler.ops.gemm_mma import (
    MmaSchedule,
    Operand,
    block_limit,
    clamp_count,
    copy_tile,
    mma_mainloop,
    mma_space,
    operands,
    schedule_problem,
    stage_buffers,
    store_accumulators,
)
from compiler.ops.matmul_spec import MatmulSpec
from compiler.program import Program
from compiler.space import Constraint, ScheduleDoesNotFitError, Space

DTYPES: dict[str, DataType] = {"float16": f16, "bfloat16": bf16}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def copy_width(extent: int) -> int:
    """Widest chunk (8, 4, 2 or 1 elements) whose starts stay aligned when rows are ``extent`` long.

    >>> copy_width(64), copy_width(84), copy_width(90), copy_width(83)
    (8, 4, 2, 1)
    """
    return next(w for w in (8, 4, 2, 1) if extent % w == 0)


def build(spec: MatmulSpec, schedule: MmaSchedule) -> Program:
    """The CUDA kernel ``c[b] = a[b] @ b[b]`` for ``spec`` tiled by ``schedule``."""
    if spec.dtype not in DTYPES:
        raise ValueError(f"the tensor-core matmul takes float16 or bfloat16, not {spec.dtype!r}")
    problem = schedule_problem(schedule)
    if problem is not None:
        raise ScheduleDoesNotFitError(f"schedule {schedule}: {problem}")
    dtype = DTYPES[spec.dtype]
    m, n, k = spec.m, spec.n, spec.k
    op_a, op_b = operands(schedule, spec.layout_a == "row", spec.layout_b == "col")
    threads = schedule.threads
    row_tiles = _cdiv(m, schedule.block_m)
    grid = (row_tiles * _cdiv(n, schedule.block_n), 1, spec.batch)
    name = f"matmul_mma_{spec.dtype}_{spec.layout_a}_{spec.layout_b}"
    # min_blocks=1 lets ptxas use the registers it needs: without it, it sometimes spills a few bytes.
    with kernel(name, block=threads, grid=grid, min_blocks=1) as builder:
        # Copies clamp their coordinates into the tensor and stores are under if: no offset outside a
        # tensor is formed, so 32-bit offsets serve exactly the tensors whose elements fit an int.
        a = builder.tensor("a", dtype, spec.a_shape, const=True, overshoot=0)
        b = builder.tensor("b", dtype, spec.b_shape, const=True, overshoot=0)
        c = builder.tensor("c", dtype, spec.c_shape, overshoot=0)
        smem_a, smem_b = stage_buffers(builder, dtype, op_a, op_b)
        batch = blockIdx.z
        row0 = let("row0", blockIdx.x % row_tiles * schedule.block_m)
        col0 = let("col0", blockIdx.x // row_tiles * schedule.block_n)
        fetch_a = _operand_source(a, batch, row0, m, k, op_a)
        fetch_b = _operand_source(b, batch, col0, n, k, op_b)
        width_a = copy_width(k if op_a.k_contiguous else m)
        width_b = copy_width(k if op_b.k_contiguous else n)

        def fetch(stage: Expr, k_tile: Expr) -> None:
            k0 = k_tile * schedule.block_k
            copy_tile(smem_a, stage, op_a, fetch_a(k0, width_a), width_a, threads)
            copy_tile(smem_b, stage, op_b, fetch_b(k0, width_b), width_b, threads)

        acc = mma_mainloop(schedule, dtype, smem_a, smem_b, op_a, op_b, fetch, _cdiv(k, schedule.block_k))

        def write(row: Expr, col: Expr, low: Expr, high: Expr) -> None:
            g_row, g_col = row0 + row, col0 + col
            if n % 2 == 0:  # an even row length keeps the pair 4-byte aligned
                with if_(logical_and(g_row < m, g_col < n)):
                    c.store_vector((batch, g_row, g_col), floats_to_pair(dtype, low, high))
                return
            with if_(logical_and(g_row < m, g_col < n)):
                c[batch, g_row, g_col] = cast(low, dtype)
            with if_(logical_and(g_row < m, g_col + 1 < n)):
                c[batch, g_row, g_col + 1] = cast(high, dtype)

        store_accumulators(schedule, acc, write)
    return Program.single(lower(builder.kernel))


def _operand_source(tensor: Buffer, batch: Expr, outer0: Expr, outer: int, k: int, operand: Operand) -> Any:
    """``source_at(k0, width)``: the chunk source of this operand's tile for the K tile starting at ``k0``.

    A k-contiguous operand is stored ``[batch][outer][k]``, tile rows are outer indices; otherwise it is
    ``[batch][k][outer]`` and tile rows are k indices. Chunks with nothing to read point at element 0.
    """

    def source_at(k0: Expr, width: int) -> Any:
        def source(row: Expr, col: Expr) -> tuple[Buffer, tuple[Expr, ...], Expr]:
            if operand.k_contiguous:
                g_row, g_col, rows, cols = outer0 + row, k0 + col, outer, k
            else:
                g_row, g_col, rows, cols = k0 + row, outer0 + col, k, outer
            row_ok, col_ok = g_row < rows, g_col < cols
            count = select(row_ok, clamp_count(cols, g_col, width), 0)
            return tensor, (batch, select(row_ok, g_row, 0), select(col_ok, g_col, 0)), count

        return source

    return source_at


def space(spec: MatmulSpec, device: DeviceSpec, level: int) -> Space[MmaSchedule]:
    """Schedules for ``spec`` on ``device`` (see :func:`compiler.ops.gemm_mma.mma_space`)."""
    if spec.dtype not in DTYPES:
        raise ValueError(f"the tensor-core matmul takes float16 or bfloat16, not {spec.dtype!r}")
    limit_m, limit_n = block_limit(spec.m), block_limit(spec.n)
    narrow: Constraint[MmaSchedule] = Constraint(f"block tile within {limit_m} x {limit_n} (2x the padded problem)",
                        lambda s: s.block_m <= limit_m and s.block_n <= limit_n)
    return mma_space("matmul_mma", device, level, spec.layout_a == "row", spec.layout_b == "col", extra=(narrow,))
