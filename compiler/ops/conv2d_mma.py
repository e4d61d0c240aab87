"""The tensor-core conv2d template (f16 and bf16 in, f32 accumulate, y in the input dtype), and its space.

The implicit GEMM of :mod:`compiler.ops.conv2d_gemm` through the pipelined ``mma.sync`` mainloop of
:mod:`compiler.ops.gemm_mma`: ``blockIdx.x`` picks the tile (row tile ``blockIdx.x % row_tiles``), each
stage of A is gathered from x by :meth:`~compiler.ops.conv2d_gemm.ImplicitGemm.a_source`, B is copied
from the weight rows, and :func:`~compiler.ops.gemm_mma.store_accumulators` hands every column pair of
results to a writer that scatters it to ``y`` in the spec's layout (one ``__half2`` store for f16 NHWC
with an even channel count, where the pair is adjacent and aligned).

Copies. A is staged k-contiguous for NHWC channel runs and m-contiguous otherwise (output columns);
chunks of 8, 4 or 2 elements go through 16-, 8- or 4-byte ``cp.async`` where
:func:`~compiler.ops.conv2d_gemm.a_chunk` allows (whole, aligned, on one side of every image edge), and
element loads otherwise: the NCHW taps of a pixel lie ``h * w`` elements apart, so strided or padded
NCHW convolutions copy A element by element. B rows of ``c * r * s`` elements use the widest aligned chunk.

>>> from compiler.device import DEVICES
>>> spec = Conv2dSpec(n=2, c=3, h=17, w=19, k=5, r=3, s=3, stride=(2, 2), padding=(1, 1), dtype="float16")
>>> len(space(spec, DEVICES["h200"], 1).candidates())
16
"""

from __future__ import annotations

from compiler.device import DeviceSpec
from compiler.ir import Expr, blockIdx, cast, floats_to_pair, if_, kernel, let, lower
from compiler.ir.types import DataType, bf16, f16
from compiler.ops.conv2d_gemm import ImplicitGemm, a_chunk, b_chunk, weight_source
from compiler.ops.conv2d_spec import Conv2dSpec
from compiler.ops.gemm_mma import (
    MmaSchedule,
    block_limit,
    copy_tile,
    mma_mainloop,
    mma_space,
    operands,
    schedule_problem,
    stage_buffers,
    store_accumulators,
)
from compiler.program import Program
from compiler.space import Constraint, ScheduleDoesNotFitError, Space

DTYPES: dict[str, DataType] = {"float16": f16, "bfloat16": bf16}
#: Widest copy: 8 16-bit elements (16 bytes).
WIDEST = 8


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _check_dtype(spec: Conv2dSpec) -> DataType:
    if spec.dtype not in DTYPES:
        raise ValueError(f"the tensor-core conv2d takes float16 or bfloat16, not {spec.dtype!r}")
    return DTYPES[spec.dtype]


def build(spec: Conv2dSpec, schedule: MmaSchedule) -> Program:
    """The kernel ``y = conv2d(x, weight)`` for ``spec`` tiled by ``schedule``."""
    dtype = _check_dtype(spec)
    problem = schedule_problem(schedule)
    if problem is not None:
        raise ScheduleDoesNotFitError(f"schedule {schedule}: {problem}")
    gemm = ImplicitGemm(spec)
    big_m, big_n, big_k = spec.gemm_shape
    width_a, width_b = a_chunk(spec, WIDEST), b_chunk(spec, WIDEST)
    op_a, op_b = operands(schedule, gemm.a_k_contiguous(width_a), True)
    threads = schedule.threads
    row_tiles = _cdiv(big_m, schedule.block_m)
    grid = row_tiles * _cdiv(big_n, schedule.block_n)
    # NHWC rows of an even number of output channels keep each column pair one aligned __half2.
    paired = spec.layout == "NHWC" and big_n % 2 == 0
    with kernel(f"conv2d_mma_{spec.dtype}_{spec.layout.lower()}", block=threads, grid=grid) as builder:
        # Copies clamp their coordinates into the tensor (select) and stores are under if: offsets
        # stay inside each tensor, so 32-bit offsets serve exactly the tensors that fit an int.
        x = builder.tensor("x", dtype, spec.x_shape, const=True, overshoot=0)
        weight = builder.tensor("weight", dtype, (big_n, big_k), const=True, overshoot=0)
        y = builder.tensor("y", dtype, spec.y_shape, overshoot=0)
        smem_a, smem_b = stage_buffers(builder, dtype, op_a, op_b)
        row0 = let("row0", blockIdx.x % row_tiles * schedule.block_m)
        col0 = let("col0", blockIdx.x // row_tiles * schedule.block_n)

        def fetch(stage: Expr, k_tile: Expr) -> None:
            k0 = k_tile * schedule.block_k
            copy_tile(smem_a, stage, op_a, gemm.a_source(x, row0, k0, width_a), width_a, threads)
            copy_tile(smem_b, stage, op_b, weight_source(weight, col0, k0, width_b, spec), width_b, threads)

        acc = mma_mainloop(schedule, dtype, smem_a, smem_b, op_a, op_b, fetch, _cdiv(big_k, schedule.block_k))

        def write(row: Expr, col: Expr, low: Expr, high: Expr) -> None:
            m, j = row0 + row, col0 + col
            indices, inside = gemm.output(m, j)
            if paired:
                with if_(inside):
                    y.store_vector(indices, floats_to_pair(dtype, low, high))
                return
            with if_(inside):
                y[indices] = cast(low, dtype)
            indices, inside = gemm.output(m, j + 1)
            with if_(inside):
                y[indices] = cast(high, dtype)

        store_accumulators(schedule, acc, write)
    return Program.single(lower(builder.kernel))


def space(spec: Conv2dSpec, device: DeviceSpec, level: int) -> Space[MmaSchedule]:
    """The matmul tensor-core space (:func:`~compiler.ops.gemm_mma.mma_space`) for the implicit GEMM."""
    _check_dtype(spec)
    limit_n = block_limit(spec.k)
    narrow: Constraint[MmaSchedule] = Constraint(f"block_n <= {limit_n} (2x the padded output channels)",
                        lambda s: s.block_n <= limit_n)
    limit_m = block_limit(spec.n * spec.p * spec.q)
    short: Constraint[MmaSchedule] = Constraint(f"block_m <= {limit_m} (2x the padded output pixels)",
                                                lambda s: s.block_m <= limit_m)
    a_k_contiguous = ImplicitGemm(spec).a_k_contiguous(a_chunk(spec, WIDEST))
    return mma_space("conv2d_mma", device, level, a_k_contiguous, True, extra=(narrow, short))
