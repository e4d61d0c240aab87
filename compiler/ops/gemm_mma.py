"""A tensor-core GEMM mainloop (mma.sync m16n8k16, f32 accumulate) that any implicit GEMM can reuse.

The block computes a ``block_m x block_n`` tile of ``C = A @ B`` with ``A: m x k`` and ``B: k x n``.
Its warps form a ``(block_m / warp_m) x (block_n / warp_n)`` grid; a warp covers its tile with
``warp_m / 16 x warp_n / 8`` mma tiles. K advances ``block_k`` at a time through ``stages`` shared
buffers filled by ``cp.async``: while the warps multiply stage ``t % stages``, the copies of the next
``stages - 1`` tiles are in flight.

Filling a stage is the caller's business (a :data:`Fetch`), so matmul reads plain tensors and a
convolution reads an im2col view through the same mainloop. ``copy_tile`` is the ready-made fetch for a
tile whose columns are contiguous in global memory.

Shared layout: each operand is staged either k-contiguous (``[stage][outer][block_k]``) or
outer-contiguous (``[stage][block_k][outer]``), whichever matches global memory so every copy is a
contiguous run; rows are XOR-swizzled in 16-byte units (``compiler.ops.smem_layout``) so neither the
copies nor ldmatrix meet bank conflicts.

An implicit GEMM (conv2d, say) uses the pieces in this order inside ``with kernel(...) as builder``::

    op_a, op_b = operands(schedule, a_k_contiguous=True, b_k_contiguous=True)
    smem_a, smem_b = stage_buffers(builder, f16, op_a, op_b)

    def fetch(stage, k_tile):                  # global -> shared for one K tile, not committed
        copy_tile(smem_a, stage, op_a, im2col_source(k_tile * schedule.block_k), width, schedule.threads)
        copy_tile(smem_b, stage, op_b, filter_source(k_tile * schedule.block_k), width, schedule.threads)

    acc = mma_mainloop(schedule, f16, smem_a, smem_b, op_a, op_b, fetch, num_k_tiles)
    store_accumulators(schedule, acc, write)   # write(row, col, low, high): columns col and col + 1

A :data:`Source` maps a chunk's tile coordinates to (tensor, indices, elements present); ``width`` (8,
4, 2 or 1 elements) must keep every chunk start aligned to ``2 * width`` bytes in global memory.
``mma_space`` gives the schedule space with the resource constraints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compiler.device import DeviceSpec
from compiler.ir import (
    Buffer,
    Expr,
    call,
    cast,
    extern_call,
    f32,
    i32,
    if_,
    let,
    max_,
    min_,
    range_,
    registers,
    select,
    shared,
    sync_threads,
    threadIdx,
    u32,
)
from compiler.ir.lang import KernelBuilder
from compiler.ir.types import DataType, bf16, f16
from compiler.mapping import auto_map
from compiler.ops.smem_layout import TileLayout
from compiler.space import Constraint, EmptySpaceError, Param, Space, with_preferred_default

MMA_M, MMA_N, MMA_K = 16, 8, 16
#: Largest static shared memory; a bigger pipeline asks for dynamic shared memory at launch.
STATIC_SHARED_LIMIT = 48 * 1024
#: cp.async wrapper per copy width in 16-bit elements; width 1 falls back to element loads.
COPY_WRAPPER = {8: "wm_cp_async_16", 4: "wm_cp_async_8", 2: "wm_cp_async_4"}


@dataclass(frozen=True)
class MmaSchedule:
    """Tiling of a tensor-core GEMM.

    >>> s = MmaSchedule(block_m=64, block_n=128, block_k=32, warp_m=32, warp_n=64, stages=3)
    >>> s.warps, s.threads, s.mma_tiles
    ((2, 2), 128, (2, 8))
    """

    block_m: int
    block_n: int
    block_k: int
    warp_m: int
    warp_n: int
    stages: int

    @property
    def warps(self) -> tuple[int, int]:
        return self.block_m // self.warp_m, self.block_n // self.warp_n

    @property
    def threads(self) -> int:
        return self.warps[0] * self.warps[1] * 32

    @property
    def mma_tiles(self) -> tuple[int, int]:
        """mma tiles per warp along m and n."""
        return self.warp_m // MMA_M, self.warp_n // MMA_N

    def register_estimate(self) -> int:
        """Accumulators and fragments plus an allowance for addresses and loop state (ptxas measured)."""
        tiles_m, tiles_n = self.mma_tiles
        return tiles_m * tiles_n * 4 + tiles_m * 4 + tiles_n * 2 + 48


@dataclass(frozen=True)
class Operand:
    """How one operand (``A`` with outer = m, or ``B`` with outer = n) is staged in shared memory."""

    outer: int
    block_k: int
    stages: int
    k_contiguous: bool

    @property
    def tile(self) -> tuple[int, int]:
        """Rows and columns of one stage as global memory presents them (columns contiguous)."""
        return (self.outer, self.block_k) if self.k_contiguous else (self.block_k, self.outer)

    @property
    def layout(self) -> TileLayout:
        return TileLayout(*self.tile)

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.stages, *self.layout.shape

    def at(self, stage: Any, row: Any, col: Any) -> tuple[Any, Any, Any]:
        """Indices into the staging buffer of tile element ``(row, col)`` of ``stage``."""
        return (stage, *self.layout.index(row, col))

    @property
    def nbytes(self) -> int:
        stages, rows, cols = self.shape
        return stages * rows * cols * 2


def operands(schedule: MmaSchedule, a_k_contiguous: bool, b_k_contiguous: bool) -> tuple[Operand, Operand]:
    return (Operand(schedule.block_m, schedule.block_k, schedule.stages, a_k_contiguous),
            Operand(schedule.block_n, schedule.block_k, schedule.stages, b_k_contiguous))


def stage_buffers(builder: KernelBuilder, dtype: DataType, a: Operand, b: Operand) -> tuple[Buffer, Buffer]:
    """Shared buffers ``smem_a`` and ``smem_b``: static up to 48 KB, else dynamic (grows the launch request)."""
    if a.nbytes + b.nbytes <= STATIC_SHARED_LIMIT:
        return shared("smem_a", dtype, a.shape), shared("smem_b", dtype, b.shape)
    return (builder.dynamic_shared("smem_a", dtype, a.shape),
            builder.dynamic_shared("smem_b", dtype, b.shape, byte_offset=a.nbytes))


def shared_bytes(schedule: MmaSchedule, a_k_contiguous: bool = True, b_k_contiguous: bool = True) -> int:
    a, b = operands(schedule, a_k_contiguous, b_k_contiguous)
    return a.nbytes + b.nbytes


#: ``fetch(stage, k_tile)`` issues (without committing) the copies of K tile ``k_tile`` into ``stage``.
Fetch = Callable[[Expr, Expr], None]
#: ``source(row, col)`` for the chunk starting at tile ``(row, col)``: the global tensor, the indices of
#: the chunk's first element, and how many of its elements exist (0 .. width; the rest read as zero).
#: When the count is 0 the indices must still be in bounds and aligned (point at element 0, say).
Source = Callable[[Expr, Expr], tuple[Buffer, tuple[Any, ...], Expr]]


def copy_tile(smem: Buffer, stage: Expr, operand: Operand, source: Source, width: int, threads: int) -> None:
    """Copy one stage, ``width`` contiguous elements per chunk, spread over ``threads`` threads.

    Widths 8, 4 and 2 use 16-, 8- and 4-byte ``cp.async`` with zero-fill past the edges; width 1 loads
    element by element (for rows whose starts are not 4-byte aligned), synchronously.
    """
    rows, cols = operand.tile
    mapping = auto_map(rows, cols // width, workers=threads)
    for r, c in mapping.on(threadIdx.x):
        tensor, indices, count = source(r, c * width)
        if width == 1:
            value = select(count > 0, tensor[indices], cast(0.0, smem.dtype))
            smem[operand.at(stage, r, c)] = value
        else:
            src_bytes = max_(0, min_(count, width)) * 2
            target = smem.address(*operand.at(stage, r, c * width))
            call(extern_call(COPY_WRAPPER[width], target, tensor.address(*indices), src_bytes))


def clamp_count(limit: Expr | int, start: Expr, width: int) -> Expr:
    """Elements of a ``width`` chunk at ``start`` below ``limit``: ``clamp(limit - start, 0, width)``."""
    return max_(0, min_(limit - start, width))


def _load_a(frag: Expr, smem: Buffer, stage: Expr, operand: Operand, row0: Expr, kk: int, lane: Expr) -> None:
    """ldmatrix x4 of the 16 x 16 A tile at (row0, kk): matrices (m lo, k lo), (m hi, k lo), (m lo, k hi) ..."""
    if operand.k_contiguous:
        address = smem.address(*operand.at(stage, row0 + lane % 16, kk + lane // 16 * 8))
        call(extern_call("wm_ldmatrix_x4", frag, address))
    else:  # stored [k][m]: the transposing load hands each lane the row-major fragment
        address = smem.address(*operand.at(stage, kk + lane // 16 * 8 + lane % 8, row0 + lane // 8 % 2 * 8))
        call(extern_call("wm_ldmatrix_x4_trans", frag, address))


def _load_b(frag: Expr, smem: Buffer, stage: Expr, operand: Operand, col0: Expr, kk: int, lane: Expr) -> None:
    """ldmatrix x4 of two 16 x 8 B tiles at columns col0 and col0 + 8: (n0, k lo), (n0, k hi), (n1, k lo) ..."""
    if operand.k_contiguous:  # stored [n][k]: each 8 x 8 matrix is already B's column fragment
        address = smem.address(*operand.at(stage, col0 + lane // 16 * 8 + lane % 8, kk + lane // 8 % 2 * 8))
        call(extern_call("wm_ldmatrix_x4", frag, address))
    else:
        address = smem.address(*operand.at(stage, kk + lane // 8 % 2 * 8 + lane % 8, col0 + lane // 16 * 8))
        call(extern_call("wm_ldmatrix_x4_trans", frag, address))


def mma_mainloop(schedule: MmaSchedule, dtype: DataType, smem_a: Buffer, smem_b: Buffer,
                 a: Operand, b: Operand, fetch: Fetch, num_k_tiles: Expr | int) -> Buffer:
    """Emit the pipelined loop; returns the accumulators ``acc[tile_m][tile_n][4]`` (f32).

    Pipeline: stages ``0 .. stages-2`` are fetched up front, one commit group per K tile (empty groups
    past the end keep the count uniform). Iteration ``t`` waits until at most ``stages - 2`` groups are
    pending (so tile ``t`` has landed), syncs (so every warp is done with the stage about to be
    overwritten, read in iteration ``t - 1``), starts the fetch of tile ``t + stages - 1``, then multiplies.
    """
    if dtype not in (f16, bf16):
        raise ValueError(f"tensor-core mainloop takes f16 or bf16 operands, not {dtype}")
    mma = "wm_mma_m16n8k16_f16" if dtype == f16 else "wm_mma_m16n8k16_bf16"
    tiles_m, tiles_n = schedule.mma_tiles
    stages = schedule.stages
    lane = let("lane", threadIdx.x % 32)
    warp = let("warp", threadIdx.x // 32)
    warp_row = let("warp_row", warp // schedule.warps[1] * schedule.warp_m)
    warp_col = let("warp_col", warp % schedule.warps[1] * schedule.warp_n)
    acc = registers("acc", f32, (tiles_m, tiles_n, 4))
    frag_a = registers("frag_a", u32, (tiles_m, 4))
    frag_b = registers("frag_b", u32, (tiles_n, 2))
    for i in range(tiles_m):
        for j in range(tiles_n):
            for r in range(4):
                acc[i, j, r] = 0.0
    for s in range(stages - 1):
        with if_(_i32(s) < num_k_tiles):
            fetch(_i32(s), _i32(s))
        call(extern_call("wm_cp_async_commit"))
    for k_tile in range_(num_k_tiles, name="k_tile"):
        call(extern_call("wm_cp_async_wait", template_args=(stages - 2,)))
        sync_threads()
        ahead = let("ahead", k_tile + (stages - 1))
        with if_(ahead < num_k_tiles):
            fetch(ahead % stages, ahead)
        call(extern_call("wm_cp_async_commit"))
        stage = let("stage", k_tile % stages)
        for kk in range(0, schedule.block_k, MMA_K):
            for i in range(tiles_m):
                _load_a(frag_a.address(i, 0), smem_a, stage, a, warp_row + i * MMA_M, kk, lane)
            for j in range(0, tiles_n, 2):
                _load_b(frag_b.address(j, 0), smem_b, stage, b, warp_col + j * MMA_N, kk, lane)
            for i in range(tiles_m):
                for j in range(tiles_n):
                    call(extern_call(mma, acc.address(i, j, 0), frag_a.address(i, 0), frag_b.address(j, 0),
                                     acc.address(i, j, 0)))
    call(extern_call("wm_cp_async_wait", template_args=(0,)))
    return acc


def _i32(value: int) -> Expr:
    return cast(value, i32)


#: ``write(row, col, low, high)`` stores the f32 accumulators of block-tile elements ``(row, col)`` and
#: ``(row, col + 1)``; ``col`` is even.
Write = Callable[[Expr, Expr, Expr, Expr], None]


def store_accumulators(schedule: MmaSchedule, acc: Buffer, write: Write) -> None:
    """Hand the accumulators to ``write`` in column pairs with block-tile coordinates (mma D layout)."""
    tiles_m, tiles_n = schedule.mma_tiles
    lane = let("out_lane", threadIdx.x % 32)
    warp = let("out_warp", threadIdx.x // 32)
    group = let("group", warp // schedule.warps[1] * schedule.warp_m + lane // 4)
    pair = let("pair", warp % schedule.warps[1] * schedule.warp_n + lane % 4 * 2)
    for i in range(tiles_m):
        for j in range(tiles_n):
            for half in range(2):
                write(group + (i * MMA_M + half * 8), pair + j * MMA_N, acc[i, j, 2 * half], acc[i, j, 2 * half + 1])


def schedule_problem(s: MmaSchedule) -> str | None:
    """Why ``s`` cannot be built at all (tile arithmetic), or None."""
    if s.warp_m % MMA_M or s.warp_n % 16:
        return "warp tile must be a multiple of 16 x 16"
    if s.block_m % s.warp_m or s.block_n % s.warp_n:
        return "block tile must be a multiple of the warp tile"
    if s.block_k % 16:
        return "block_k must be a multiple of 16"
    if not 2 <= s.stages <= 4:
        return "stages must be 2, 3 or 4"
    return None


def _copies_tile(s: MmaSchedule) -> bool:
    """Every thread copies whole 16-byte chunks of both tiles (narrower widths only multiply the count)."""
    return (s.block_m * s.block_k // 8) % s.threads == 0 and (s.block_n * s.block_k // 8) % s.threads == 0


def block_limit(extent: int) -> int:
    """The largest block tile worth trying along a GEMM dimension of ``extent``: twice the extent padded to
    16 (a larger tile is mostly padding), and never below 64, the smallest tile of level 1."""
    return max(2 * 16 * -(-extent // 16), 64)


#: Per level: block_m/block_n choices, warp tile choices, block_k choices, stages.
_LEVELS: dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {
    1: ((64, 128), (32, 64), (32,), (2, 3)),
    2: ((32, 64, 128, 256), (16, 32, 64, 128), (16, 32, 64), (2, 3, 4)),
}


def mma_space(template: str, device: DeviceSpec, level: int, a_k_contiguous: bool, b_k_contiguous: bool,
              extra: tuple[Constraint[MmaSchedule], ...] = ()) -> Space[MmaSchedule]:
    """Tensor-core GEMM schedules for ``device``; level 1 is small enough to check exhaustively.

    The operand layouts only change the shared-memory footprint (which dimension may be padded);
    ``extra`` adds the caller's own constraints (grid limits, say).
    """
    if level not in _LEVELS:
        raise ValueError(f"space level must be one of {sorted(_LEVELS)}, got {level!r}")
    if not device.has_tensor_cores:
        raise EmptySpaceError(f"{template}: needs sm_80 or newer tensor cores (mma.sync m16n8k16, cp.async); "
                             f"{device.name} is {device.arch}")
    blocks, warps, block_ks, stages = _LEVELS[level]
    shared_limit = device.max_shared_dynamic
    layouts = (a_k_contiguous, b_k_contiguous)
    constraints: tuple[Constraint[MmaSchedule], ...] = (
        Constraint("tile divisibility", lambda s: schedule_problem(s) is None),
        Constraint("threads <= max per block", lambda s: s.threads <= device.max_threads_per_block),
        Constraint("cp.async mappings tile the block", _copies_tile),
        Constraint("registers <= max per thread",
                   lambda s: s.register_estimate() <= device.max_registers_per_thread),
        Constraint("registers <= max per block",
                   lambda s: s.register_estimate() * s.threads <= device.max_registers_per_block),
        Constraint("shared memory <= device limit",
                   lambda s: sum(o.nbytes for o in operands(s, *layouts)) <= shared_limit),
    )
    space = Space(
        template=template,
        params=(Param("block_m", blocks), Param("block_n", blocks), Param("block_k", block_ks),
                Param("warp_m", warps), Param("warp_n", warps), Param("stages", stages)),
        make=lambda p: MmaSchedule(**p),
        constraints=constraints + extra,
    )
    return with_preferred_default(space, PREFERRED)


#: The default's candidates (``with_preferred_default``), largest first: the usual Ampere tile (128 x 128
#: blocks of four 64 x 64 warp tiles, block_k 32, a 3-stage cp.async pipeline), then halved tiles for
#: problems, specs (the caller's grid limits) and devices it does not fit, and fewer stages.
PREFERRED: tuple[dict[str, int], ...] = tuple(
    {"block_m": bm, "block_n": bn, "block_k": 32, "warp_m": wm, "warp_n": wn, "stages": stages}
    for bm, bn, wm, wn in ((128, 128, 64, 64), (128, 64, 64, 32), (64, 128, 32, 64), (64, 64, 32, 32),
                           (64, 32, 32, 16), (32, 64, 16, 32), (32, 32, 16, 16))
    for stages in (3, 2))
