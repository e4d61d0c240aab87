"""The float32 conv2d template on CUDA cores: the SIMT GEMM mainloop over the im2col view of x.

A block computes a ``block_m x block_n`` tile of the implicit GEMM (output pixels x output channels)
with :func:`compiler.ops.gemm_simt.simt_gemm`; A is a :class:`~compiler.ops.conv2d_gemm.PatchOperand`
(padding, stride and dilation in its predicate), B the weight read as a k-contiguous ``[k, c*r*s]``
matrix through :class:`~compiler.ops.gemm_simt.StridedOperand`. ``blockIdx.x`` walks the tiles row by
row; the epilogue scatters each accumulator to its ``y`` element in the spec's layout.

Schedules are :class:`~compiler.ops.matmul_simt.SimtSchedule` from the matmul's own levels; ``vector=4``
reads 16 bytes per load for each operand where :func:`~compiler.ops.conv2d_gemm.a_chunk` (A) or the
weight rows (B) allow it.

>>> from compiler.device import DEVICES
>>> spec = Conv2dSpec(n=2, c=3, h=17, w=19, k=5, r=3, s=3, stride=(2, 2), padding=(1, 1))
>>> found = space(spec, DEVICES["h200"], 1).enumerate()
>>> len(found.valid), found.rejected
(20, {'block tile within 384 x 32 (2x the padded problem)': 12})
"""

from __future__ import annotations

from compiler.device import DeviceSpec
from compiler.ir import blockIdx, f32, if_, kernel, lower, threadIdx
from compiler.ir.expr import as_expr
from compiler.ops.conv2d_gemm import ImplicitGemm, PatchOperand, a_chunk, b_chunk
from compiler.ops.conv2d_spec import Conv2dSpec
from compiler.ops.gemm_simt import StridedOperand, simt_gemm
from compiler.ops.matmul_simt import PAD, SMALL_TILE, SimtSchedule, level_space
from compiler.program import Program
from compiler.space import Constraint, Space


def operand_vectors(spec: Conv2dSpec, vector: int) -> tuple[int, int]:
    """Load widths used for A and B: ``vector`` where the operand allows it, else 1."""
    return (vector if a_chunk(spec, vector) == vector else 1, vector if b_chunk(spec, vector) == vector else 1)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def constraints(spec: Conv2dSpec, device: DeviceSpec, *, scalar_choice: bool = True
                ) -> tuple[Constraint[SimtSchedule], ...]:
    """The matmul SIMT rules (resources, load division, tile size, FMA density) for the implicit GEMM.

    ``scalar_choice``: the space also offers ``vector=1``, so ``vector=4`` where neither operand can
    use it (the same kernel) is a duplicate and is ruled out.
    """
    big_m, big_n, _ = spec.gemm_shape
    limit_m = max(2 * _round_up(big_m, PAD), SMALL_TILE)
    limit_n = max(2 * _round_up(big_n, PAD), SMALL_TILE)
    gemm = ImplicitGemm(spec)

    def registers(s: SimtSchedule) -> int:
        return s.estimated_registers(*operand_vectors(spec, s.vector))

    def loads_divide(s: SimtSchedule) -> bool:
        vec_a, vec_b = operand_vectors(spec, s.vector)
        return s.loads_divide(gemm.a_k_contiguous(vec_a), vec_a, True, vec_b)

    rules: tuple[Constraint[SimtSchedule], ...] = (
        Constraint(f"threads per block <= {device.max_threads_per_block}",
                   lambda s: s.threads <= device.max_threads_per_block),
        Constraint(f"shared memory <= {device.max_shared_static} B",
                   lambda s: s.shared_bytes() <= device.max_shared_static),
        Constraint(f"estimated registers per thread <= {device.max_registers_per_thread}",
                   lambda s: registers(s) <= device.max_registers_per_thread),
        Constraint(f"estimated registers per block <= {device.max_registers_per_block}",
                   lambda s: registers(s) * s.threads <= device.max_registers_per_block),
        Constraint("tile loads divide among the threads", loads_divide),
        Constraint(f"block tile within {limit_m} x {limit_n} (2x the padded problem)",
                   lambda s: s.block_m <= limit_m and s.block_n <= limit_n),
        Constraint("at least 2 FMAs per shared-memory load", lambda s: s.accumulators >= 2 * s.fragments),
    )
    if not scalar_choice:
        return rules
    return (*rules, Constraint("vector=4 with no operand divisible by 4 duplicates vector=1",
                               lambda s: s.vector == 1 or operand_vectors(spec, s.vector) != (1, 1)))


def space(spec: Conv2dSpec, device: DeviceSpec, level: int) -> Space[SimtSchedule]:
    """SIMT schedules for ``spec`` at ``level`` (the matmul SIMT levels)."""
    if spec.dtype != "float32":
        raise ValueError(f"the SIMT conv2d template computes float32, not {spec.dtype}")
    return level_space("conv2d_simt", level, lambda scalar: constraints(spec, device, scalar_choice=scalar))


def build(spec: Conv2dSpec, schedule: SimtSchedule) -> Program:
    """The kernel ``y = conv2d(x, weight)`` for ``spec``: parameters ``x``, ``weight`` (inputs) and ``y``."""
    if spec.dtype != "float32":
        raise ValueError(f"the SIMT conv2d template computes float32, not {spec.dtype}")
    big_m, big_n, big_k = spec.gemm_shape
    tiles_n = -(-big_n // schedule.block_n)
    grid = -(-big_m // schedule.block_m) * tiles_n
    vec_a, vec_b = operand_vectors(spec, schedule.vector)
    gemm = ImplicitGemm(spec)
    with kernel(f"conv2d_simt_{spec.layout.lower()}", block=schedule.threads, grid=grid) as k:
        # Loads are under select/if and stores under if: offsets stay inside each tensor.
        x = k.tensor("x", f32, spec.x_shape, const=True, overshoot=0)
        weight = k.tensor("weight", f32, (1, big_n, big_k), const=True, overshoot=0)
        y = k.tensor("y", f32, spec.y_shape, overshoot=0)
        row0 = blockIdx.x // tiles_n * schedule.block_m
        col0 = blockIdx.x % tiles_n * schedule.block_n
        patches = PatchOperand(gemm, x, vec_a)
        filters = StridedOperand(weight, as_expr(0), big_n, big_k, k_contiguous=True, vector=vec_b)
        acc = simt_gemm(schedule, patches, filters, origin=(row0, col0), k_extent=big_k)
        for i, j in schedule.compute.on(threadIdx.x):
            indices, inside = gemm.output(row0 + i, col0 + j)
            with if_(inside):
                y[indices] = acc[i, j]
    return Program.single(lower(k.kernel))
