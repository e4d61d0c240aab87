"""The float32 matmul template on CUDA cores: the SIMT mainloop of ``gemm_simt`` over strided A and B.

Grid: ``blockIdx.x`` walks the C tiles row by row (``tiles_m * tiles_n`` of them), ``blockIdx.z`` the
batch. A is read as ``[batch, m, k]`` (row) or ``[batch, k, m]`` (col), B as ``[batch, k, n]`` or
``[batch, n, k]``, C is written ``[batch, m, n]``; any sizes, edges predicated.

A schedule is a :class:`~compiler.ops.gemm_simt.SimtTile` plus ``vector``: 4 asks for 16-byte global
loads, used for each operand whose contiguous extent is a multiple of 4 (rows and tile offsets are then
16-byte aligned), scalar loads for the other. The space at level 1 is at most 32 schedules for tests
(4x4 thread tiles, every lane shape, 16-byte loads where aligned); level 2 is the production space, a
few hundred to about 3900 valid schedules (it also offers scalar loads and 2- and 8-wide thread tiles).

>>> from compiler.device import DEVICES
>>> spec = MatmulSpec(m=67, n=45, k=83, batch=3, layout_a="col")
>>> found = space(spec, DEVICES["h200"], 1).enumerate()
>>> len(found.valid), found.rejected
(24, {'block tile within 160 x 96 (2x the padded problem)': 8})
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from compiler.device import DeviceSpec
from compiler.ir import blockIdx, f32, if_, kernel, logical_and, lower, threadIdx
from compiler.ops.gemm_simt import SimtTile, StridedOperand, simt_gemm, vector_aligned
from compiler.ops.matmul_spec import MatmulSpec
from compiler.program import Program
from compiler.space import Constraint, Param, Space, with_preferred_default

#: Block tiles may exceed the problem (rounded up to this) by at most 2x ...
PAD = 16
#: ... or be this small whatever the problem: every level has a candidate within it.
SMALL_TILE = 32


@dataclass(frozen=True)
class SimtSchedule(SimtTile):
    """A :class:`SimtTile` and the global load width (1, or 4 for 16-byte loads where aligned)."""

    vector: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.vector not in (1, 4):
            raise ValueError(f"SimtSchedule.vector must be 1 or 4, got {self.vector!r}")


#: Choices per parameter and level; names are the schedule's fields.
LEVELS: dict[int, dict[str, tuple[int, ...]]] = {
    1: {
        "warps_m": (1, 2),
        "warps_n": (1, 2),
        "repeat_m": (2,),
        "repeat_n": (1,),
        "lanes_m": (2, 4, 8, 16),
        "thread_m": (4,),
        "thread_n": (4,),
        "block_k": (8, 16),
        "vector": (4,),
    },
    2: {
        "warps_m": (1, 2, 4),
        "warps_n": (1, 2, 4),
        "repeat_m": (1, 2),
        "repeat_n": (1, 2),
        "lanes_m": (2, 4, 8, 16),
        "thread_m": (2, 4, 8),
        "thread_n": (2, 4, 8),
        "block_k": (8, 16, 32),
        "vector": (1, 4),
    },
}


def operand_vectors(spec: MatmulSpec, vector: int) -> tuple[int, int]:
    """The load width actually used for A and B: ``vector`` where the contiguous extent allows, else 1."""
    a_contiguous = spec.k if spec.layout_a == "row" else spec.m
    b_contiguous = spec.n if spec.layout_b == "row" else spec.k
    return (
        vector if vector_aligned(a_contiguous, vector) else 1,
        vector if vector_aligned(b_contiguous, vector) else 1,
    )


def estimated_registers(schedule: SimtSchedule, spec: MatmulSpec) -> int:
    """The mainloop's register estimate with the load widths ``spec`` allows."""
    return schedule.estimated_registers(*operand_vectors(spec, schedule.vector))


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def constraints(spec: MatmulSpec, device: DeviceSpec, *, scalar_choice: bool = True
                ) -> tuple[Constraint[SimtSchedule], ...]:
    """What rules a schedule out for ``spec`` on ``device`` before anything is compiled.

    ``scalar_choice``: the space also offers ``vector=1``, so ``vector=4`` with no aligned operand (the
    same kernel) is a duplicate and is ruled out.
    """
    limit_m = max(2 * _round_up(spec.m, PAD), SMALL_TILE)
    limit_n = max(2 * _round_up(spec.n, PAD), SMALL_TILE)
    a_k_contiguous = spec.layout_a == "row"
    b_k_contiguous = spec.layout_b == "col"

    def loads_divide(s: SimtSchedule) -> bool:
        vec_a, vec_b = operand_vectors(spec, s.vector)
        return s.loads_divide(a_k_contiguous, vec_a, b_k_contiguous, vec_b)

    def registers(s: SimtSchedule) -> int:
        return estimated_registers(s, spec)

    checks: list[tuple[str, Callable[[SimtSchedule], bool]]] = [
        (f"threads per block <= {device.max_threads_per_block}", lambda s: s.threads <= device.max_threads_per_block),
        (f"shared memory <= {device.max_shared_static} B", lambda s: s.shared_bytes() <= device.max_shared_static),
        (f"estimated registers per thread <= {device.max_registers_per_thread}",
         lambda s: registers(s) <= device.max_registers_per_thread),
        (f"estimated registers per block <= {device.max_registers_per_block}",
         lambda s: registers(s) * s.threads <= device.max_registers_per_block),
        ("tile loads divide among the threads", loads_divide),
        (f"block tile within {limit_m} x {limit_n} (2x the padded problem)",
         lambda s: s.block_m <= limit_m and s.block_n <= limit_n),
        ("at least 2 FMAs per shared-memory load", lambda s: s.accumulators >= 2 * s.fragments),
    ]
    if scalar_choice:
        checks.append(("vector=4 with no operand divisible by 4 duplicates vector=1",
                       lambda s: s.vector == 1 or operand_vectors(spec, s.vector) != (1, 1)))
    return tuple(Constraint(name, holds) for name, holds in checks)


def space(spec: MatmulSpec, device: DeviceSpec, level: int = 1) -> Space[SimtSchedule]:
    """The SIMT schedules for ``spec`` at ``level`` (1: tests and CI, 2: production tuning)."""
    if spec.dtype != "float32":
        raise ValueError(f"the SIMT matmul template computes float32, not {spec.dtype}")
    return level_space("matmul_simt", level, lambda scalar: constraints(spec, device, scalar_choice=scalar))


def level_space(template: str, level: int,
                rules: Callable[[bool], tuple[Constraint[SimtSchedule], ...]]) -> Space[SimtSchedule]:
    """The ``LEVELS[level]`` choices under ``rules(scalar_choice)``; shared by every SIMT GEMM template."""
    if level not in LEVELS:
        raise ValueError(f"no {template} space at level {level}; levels: {sorted(LEVELS)}")
    params = tuple(Param(name, choices) for name, choices in LEVELS[level].items())
    space = Space(template, params, lambda values: SimtSchedule(**values), rules(1 in LEVELS[level]["vector"]))
    return with_preferred_default(space, PREFERRED)


def _preferred() -> tuple[dict[str, int], ...]:
    """The default's candidates, largest block tile first: Hidet's default SIMT matmul (8 warps as 4 x 2,
    each repeating a 4 x 8-lane tile of 4 x 4 outputs per thread twice each way: 128 x 128, block_k 8),
    then halved tiles for problems and devices it does not fit; each with 4-wide loads, then scalar."""
    shapes = (  # (warps_m, warps_n, repeat_m, repeat_n, lanes_m, thread_m, thread_n): block_m x block_n
        (4, 2, 2, 2, 4, 4, 4),  # 128 x 128, 256 threads
        (2, 2, 2, 2, 4, 4, 4),  # 64 x 128
        (2, 2, 2, 1, 4, 4, 4),  # 64 x 64
        (2, 2, 1, 1, 4, 4, 4),  # 32 x 64
        (1, 1, 2, 1, 4, 4, 4),  # 32 x 32, one warp
        (1, 1, 1, 1, 4, 4, 4),  # 16 x 32
        (1, 1, 1, 1, 4, 2, 2),  # 8 x 16
    )
    names = ("warps_m", "warps_n", "repeat_m", "repeat_n", "lanes_m", "thread_m", "thread_n")
    return tuple({**dict(zip(names, shape, strict=True)), "block_k": 8, "vector": vector}
                 for shape in shapes for vector in (4, 1))


#: The default schedule's candidates (``with_preferred_default``): the first valid one is the default.
PREFERRED = _preferred()


def build(spec: MatmulSpec, schedule: SimtSchedule) -> Program:
    """The kernel computing ``spec`` with ``schedule``: parameters ``a``, ``b`` (inputs) and ``c``."""
    if spec.dtype != "float32":
        raise ValueError(f"the SIMT matmul template computes float32, not {spec.dtype}")
    tile: SimtTile = schedule
    tiles_m, tiles_n = -(-spec.m // tile.block_m), -(-spec.n // tile.block_n)
    vec_a, vec_b = operand_vectors(spec, schedule.vector)
    with kernel("matmul_simt", block=tile.threads, grid=(tiles_m * tiles_n, 1, spec.batch)) as k:
        # Loads are under select/if and stores under if: no offset is formed outside a tensor, so a
        # tensor indexes with 32-bit ints exactly when its own elements fit one (64-bit otherwise).
        a = k.tensor("a", f32, spec.a_shape, const=True, overshoot=0)
        b = k.tensor("b", f32, spec.b_shape, const=True, overshoot=0)
        c = k.tensor("c", f32, spec.c_shape, overshoot=0)
        batch = blockIdx.z
        row0 = blockIdx.x // tiles_n * tile.block_m
        col0 = blockIdx.x % tiles_n * tile.block_n
        load_a = StridedOperand(a, batch, spec.m, spec.k, k_contiguous=spec.layout_a == "row", vector=vec_a)
        load_b = StridedOperand(b, batch, spec.n, spec.k, k_contiguous=spec.layout_b == "col", vector=vec_b)
        acc = simt_gemm(tile, load_a, load_b, origin=(row0, col0), k_extent=spec.k)
        for i, j in tile.compute.on(threadIdx.x):
            row, col = row0 + i, col0 + j
            with if_(logical_and(row < spec.m, col < spec.n)):
                c[batch, row, col] = acc[i, j]
    return Program.single(lower(k.kernel))
