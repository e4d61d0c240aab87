"""The packed GEMM of the cpu templates: packing launches for A and B, and a cache-blocked compute launch.

The layout is a contract with the other cpu templates (conv2d packs its own operands into it):

- packed A, float32 ``(batch_a, ceil(M/MR), K, MR)``: element ``[b, p, kk, r] = A_b[p*MR + r, kk]``,
  zero where ``p*MR + r >= M``;
- packed B, float32 ``(batch_b, ceil(N/NR), K, NR)``: element ``[b, q, kk, c] = B_b[kk, q*NR + c]``,
  zero where ``q*NR + c >= N``.

So one micro-panel (MR rows or NR columns over a run of k) is contiguous, and the zero padding lets
the micro-kernel always compute a whole MR x NR tile: only its store is guarded.

The compute launch is the GotoBLAS loop nest with the packing hoisted out. The OpenMP grid is
``(ceil(N/NC), ceil(M/MC), batch)``: each block owns an MC x NC block of C and walks K in KC steps;
within a step it runs NR-panels (outer: the KC x NR panel of B stays in L1) over MR-panels (inner:
the MC x KC block of A stays in L2). The micro-kernel keeps its MR x NR tile in a register array,
written as plain loops whose innermost (NR) loop is ``simd``: on g++ 12 that compiles to the same
inner loop as GCC vector-extension types (a hand-written 8x32 and 12x32 micro-kernel both ways, Zen 5,
December 2026: one broadcast and NR/lanes FMAs per row and k step, equal instruction counts, speeds
within the machine's noise at about 240 GFLOP/s on one core in L1), so the IR needs no vector types
for it and the lane count stays the schedule's business. The C tile is prefetched when the
micro-kernel starts (the lines arrive while the k loop runs). A KC step after the first adds to what
the previous one stored.

``compute_packing_kernel`` is the same loop nest reading one operand or both as stored: each block packs
its KC x NC slice of B, or its MC x KC block of A, into scratch just before using it (the GotoBLAS order).
The scratch has a slot per host thread, not per block: the kernel declares up to ``SCRATCH_SLOTS``, and
the target that loads the program allocates as many as its launches there run threads
(``Workspace.per_worker``). Where the packing happens is a packer's business (``APacker``, ``BPacker``):
the matmul's reads a matrix as stored, conv2d's reads an image's patches (the im2col matrix is never
formed).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from math import ceil
from typing import Any, NamedTuple

from compiler.ir import (
    Buffer,
    Expr,
    blockIdx,
    call,
    cast,
    else_,
    f32,
    fma,
    if_,
    kernel,
    let,
    logical_and,
    lower,
    min_,
    prefetch,
    range_,
    registers,
    worker_slot,
)
from compiler.ir.kernel import Kernel

#: f32 elements in one 64-byte cache line (what one prefetch brings).
LINE_FLOATS = 16
#: Reads one element of a packed panel: (k step within the KC step, row or column within the tile).
Panel = Callable[[Expr, Expr], Expr]


class PanelSlice(NamedTuple):
    """Where ``compute_packing_kernel`` wants one KC x NR slice of B packed: into ``bw[slot, qq, kk, j]``
    for ``kk`` below ``kc`` (B's rows ``k0 + kk``) and ``j`` below NR (B's columns ``col + j``; those from
    ``cols`` on are past N and must be zero), of batch ``batch``."""

    bw: Buffer
    slot: Expr
    qq: Expr
    batch: Expr
    k0: Expr
    kc: Expr
    col: Expr
    cols: Expr


class PanelRows(NamedTuple):
    """Where ``compute_packing_kernel`` wants one MR-panel of A packed: into ``aw[slot, pp, kk, i]`` for ``kk``
    below ``kc`` (A's columns ``k0 + kk``) and ``i`` below MR (A's rows ``row0 + i``; those from ``rows`` on
    are past M and must be zero), of batch ``batch``."""

    aw: Buffer
    slot: Expr
    pp: Expr
    batch: Expr
    k0: Expr
    kc: Expr
    row0: Expr
    rows: Expr


#: Packs B slice by slice inside the compute launch from a source of its own: given the kernel builder,
#: it declares the source tensors (after A's) and returns what packs one slice. ``matrix_b_packer`` reads
#: a matrix as stored; conv2d's reads an NCHW image's patches.
BPacker = Callable[[Any], Callable[[PanelSlice], None]]
#: The same for A, panel by panel: it declares A's sources first and returns what packs one MR-panel.
#: ``matrix_a_packer`` reads a matrix as stored; conv2d's reads an NHWC image's patches.
APacker = Callable[[Any], Callable[[PanelRows], None]]


@dataclass(frozen=True)
class GemmTile:
    """Blocking of the packed GEMM: an MR x NR register tile, MC x KC blocks of A, KC x NC of B.

    ``k_unroll`` unrolls the micro-kernel's k loop; ``dynamic`` hands the compute launch's blocks to
    the host's threads as they finish (``Kernel.host_schedule``); ``prefetch_c`` prefetches the C tile
    when the micro-kernel starts.
    """

    mr: int
    nr: int
    mc: int
    kc: int
    nc: int
    k_unroll: int = 4
    prefetch_c: bool = True
    dynamic: bool = False

    def __post_init__(self) -> None:
        for name in ("mr", "nr", "mc", "kc", "nc", "k_unroll"):
            if getattr(self, name) < 1:
                raise ValueError(f"GemmTile: {name} must be positive, got {self}")

    def check(self) -> None:
        """Raise ``ValueError`` unless the blocks are whole numbers of micro-tiles (spaces filter such
        tiles with a constraint, so a tile may exist before it is checked)."""
        if self.mc % self.mr or self.nc % self.nr:
            raise ValueError(f"GemmTile: mc must be a multiple of mr and nc of nr, got {self}")

    def accumulator_registers(self, lanes: int) -> int:
        """Vector registers the micro-kernel keeps live: the tile, one row of B and a broadcast of A."""
        return self.mr * ceil(self.nr / lanes) + ceil(self.nr / lanes) + 1


def packed_a_shape(batch: int, m: int, k: int, tile: GemmTile) -> tuple[int, int, int, int]:
    return (batch, ceil(m / tile.mr), k, tile.mr)


def packed_b_shape(batch: int, k: int, n: int, tile: GemmTile) -> tuple[int, int, int, int]:
    return (batch, ceil(n / tile.nr), k, tile.nr)


def pack_a_kernel(name: str, *, batch: int, m: int, k: int, tile: GemmTile, layout: str) -> Kernel:
    """Lowered kernel ``(a, ap)``: A (``(batch, m, k)`` row-major or ``(batch, k, m)`` for ``col``)
    into the packed-A layout. One block per (MR-panel, batch); rows past M are zero."""
    return _pack_kernel(name, ("a", "ap"), batch=batch, extent=m, k=k, width=tile.mr, runs_along_k=layout == "row")


def pack_b_kernel(name: str, *, batch: int, k: int, n: int, tile: GemmTile, layout: str) -> Kernel:
    """Lowered kernel ``(b, bp)``: B (``(batch, k, n)`` row-major or ``(batch, n, k)`` for ``col``)
    into the packed-B layout. One block per (NR-panel, batch); columns past N are zero."""
    return _pack_kernel(name, ("b", "bp"), batch=batch, extent=n, k=k, width=tile.nr, runs_along_k=layout == "col")


def _pack_kernel(name: str, params: tuple[str, str], *, batch: int, extent: int, k: int, width: int,
                 runs_along_k: bool) -> Kernel:
    """Both packers are one: the source's ``extent`` axis (A's rows, B's columns) is cut into panels of
    ``width`` lanes, laid out ``[batch][panel][k][lane]``, lanes past ``extent`` zero. The source is
    ``(batch, extent, k)`` when its runs lie along K (row-major A, column-major B), else
    ``(batch, k, extent)``."""
    panels = ceil(extent / width)
    with kernel(name, block=1, grid=(panels, batch)) as kb:
        shape = (batch, extent, k) if runs_along_k else (batch, k, extent)
        src = kb.tensor(params[0], f32, shape, const=True)
        dst = kb.tensor(params[1], f32, (batch, panels, k, width))
        p, b = blockIdx.x, blockIdx.y
        lanes = let("lanes", min_(extent - p * width, width))
        if runs_along_k:
            # Lanes outermost: each reads a contiguous run of the source and writes with stride ``width``.
            for r in range_(width, name="r"):
                with if_(r < lanes):
                    for kk in range_(k, name="kk", simd=True):
                        dst[b, p, kk, r] = src[b, p * width + r, kk]
                with else_():
                    for kk in range_(k, name="kk", simd=True):
                        dst[b, p, kk, r] = 0.0
        else:
            # A whole panel copies contiguous runs; only the last one needs guards (and the simplifier
            # drops this branch where the extent is a multiple of the width).
            with if_(lanes == width):
                for kk in range_(k, name="kk"):
                    for r in range_(width, name="r", simd=True):
                        dst[b, p, kk, r] = src[b, kk, p * width + r]
            with else_():
                for kk in range_(k, name="kk"):
                    for r in range_(width, name="r", simd=True):
                        _guarded_copy(dst, (b, p, kk, r), r < lanes, src, (b, kk, p * width + r))
    return lower(kb.kernel)


def _guarded_copy(dst: Buffer, at: tuple[Expr | int, ...], inside: Expr, src: Buffer,
                  source: tuple[Expr | int, ...]) -> None:
    """``dst[at] = src[source]`` where ``inside``, zero elsewhere (the source is not read there)."""
    with if_(inside):
        dst[at] = src[source]
    with else_():
        dst[at] = 0.0


class _Blocking(NamedTuple):
    """How a compute launch cuts C: block extents, panel counts, its grid, and the elements of ``c``."""

    mc: int
    nc: int
    panels_m: int
    panels_n: int
    grid: tuple[int, int, int]
    c_size: int


def _block_extents(m: int, n: int, tile: GemmTile) -> tuple[int, int]:
    """MC and NC, shortened to the problem (whole register panels) when it is smaller than a block."""
    return min(tile.mc, ceil(m / tile.mr) * tile.mr), min(tile.nc, ceil(n / tile.nr) * tile.nr)


def _blocking(name: str, batch: int, m: int, n: int, tile: GemmTile, c_batch_stride: int,
              c_row_stride: int) -> _Blocking:
    """The blocking both compute launches share; refuses C strides that would overlap and bad tiles."""
    if c_row_stride < n or (batch > 1 and c_batch_stride < (m - 1) * c_row_stride + n):
        raise ValueError(f"{name}: C strides ({c_batch_stride}, {c_row_stride}) overlap an {m} x {n} tile")
    tile.check()
    mc, nc = _block_extents(m, n, tile)
    return _Blocking(mc, nc, ceil(m / tile.mr), ceil(n / tile.nr), (ceil(n / nc), ceil(m / mc), batch),
                     (batch - 1) * c_batch_stride + (m - 1) * c_row_stride + n)


def compute_kernel(name: str, *, batch: int, m: int, n: int, k: int, tile: GemmTile, a_batched: bool,
                   b_batched: bool, c_batch_stride: int, c_row_stride: int) -> Kernel:
    """Lowered kernel ``(ap, bp, c)``: ``c[b*c_batch_stride + i*c_row_stride + j] = sum_kk A_b[i, kk] *
    B_b[kk, j]`` for ``i < m``, ``j < n``, overwritten; nothing else of ``c`` is written.

    ``ap`` and ``bp`` are packed (see the module docstring) with ``batch`` entries, or one shared by
    every batch where ``a_batched`` / ``b_batched`` is false.
    """
    return compute_packing_kernel(name, batch=batch, m=m, n=n, k=k, tile=tile, c_batch_stride=c_batch_stride,
                                  c_row_stride=c_row_stride, a_batched=a_batched, b_batched=b_batched)


#: The most slots a packing compute launch's scratch declares, and so the most host threads it runs on.
#: A block packs into the slot of the thread running it (``worker_slot``), which the thread's next block
#: reuses while it is still in the core's caches. With a slot per block instead, the scratch grew with
#: the problem (up to 4.5 GiB for the 0.75 GiB of a 8192^3 product's operands, and every call wrote it
#: all back to memory). The program is built without knowing the host, so this bounds what it declares
#: (a grid of fewer blocks declares one per block); the target that loads it allocates one slot per
#: thread its launches run on (``compiler.program.Workspace.per_worker``): two on a two-core host.
SCRATCH_SLOTS = 256


def scratch_slots(batch: int, m: int, n: int, tile: GemmTile) -> int:
    """Slots ``compute_packing_kernel``'s scratch declares, and the most threads its launch runs on: one
    per block of its grid, at most ``SCRATCH_SLOTS``. A target allocates as many of them as a launch there
    has threads (``Workspace.per_worker``)."""
    mc, nc = _block_extents(m, n, tile)
    return min(SCRATCH_SLOTS, batch * ceil(m / mc) * ceil(n / nc))


def packing_b_workspace_shape(batch: int, m: int, n: int, tile: GemmTile) -> tuple[int, int, int, int]:
    """The declared B scratch of ``compute_packing_kernel``: one KC x NC panel set of B per slot
    (``scratch_slots``)."""
    _, nc = _block_extents(m, n, tile)
    return (scratch_slots(batch, m, n, tile), nc // tile.nr, tile.kc, tile.nr)


def packing_a_workspace_shape(batch: int, m: int, n: int, tile: GemmTile) -> tuple[int, int, int, int]:
    """The declared A scratch of ``compute_packing_kernel``: one MC x KC block of A per slot."""
    mc, _ = _block_extents(m, n, tile)
    return (scratch_slots(batch, m, n, tile), mc // tile.mr, tile.kc, tile.mr)


def matrix_a_packer(layout: str, *, batch: int, m: int, k: int, mr: int) -> APacker:
    """A as stored, ``(batch, m, k)`` row-major or ``(batch, k, m)`` for ``col``, always batched."""
    def declare(kb: Any) -> Callable[[PanelRows], None]:
        a = kb.tensor("a", f32, (batch, m, k) if layout == "row" else (batch, k, m), const=True)
        return functools.partial(_pack_a_panel, a, layout, mr)

    return declare


def matrix_b_packer(layout: str, *, batch: int, k: int, n: int, nr: int) -> BPacker:
    """B as stored, ``(batch, k, n)`` row-major or ``(batch, n, k)`` for ``col``, always batched."""
    def declare(kb: Any) -> Callable[[PanelSlice], None]:
        b = kb.tensor("b", f32, (batch, k, n) if layout == "row" else (batch, n, k), const=True)
        return functools.partial(_pack_b_slice, b, layout, nr)

    return declare


def compute_packing_kernel(name: str, *, batch: int, m: int, n: int, k: int, tile: GemmTile, c_batch_stride: int,
                           c_row_stride: int, a_packer: APacker | None = None, b_packer: BPacker | None = None,
                           a_batched: bool = True, b_batched: bool = True) -> Kernel:
    """Lowered kernel: what ``compute_kernel`` computes (which is this with no packer), with A, B or both
    packed by each block itself just before it uses them, into its thread's slot of a scratch workspace.
    Its parameters are A's
    (``ap``, packed as ``compute_kernel`` reads it, or the tensors ``a_packer`` declares), B's (``bp``, or
    ``b_packer``'s), then ``aw`` where A is packed inside (``packing_a_workspace_shape``: one MC x KC block
    a slot), ``bw`` where B is (``packing_b_workspace_shape``: one KC x NC slice a slot), and ``c``.
    ``a_batched`` / ``b_batched`` say whether a pre-packed operand has ``batch`` entries or one shared.

    The scratch has a slot per host thread: a block packs into its thread's slot. The kernel declares
    ``scratch_slots`` of them and runs on at most that many threads; a program binding ``aw`` and ``bw``
    marks them ``per_worker``, so the target that loads it allocates a slot per thread it launches on,
    which the kernel never indexes past (``worker_slot`` is below ``min(workers, host_max_workers)``).

    A slice of B is used while it sits in the core's L2, so B makes one trip from memory instead of three
    (read, packed copy written, packed copy read). Blocks in one column of the grid pack the same slice
    again: one vector copy per MC/lanes vector FMAs, a few percent. A block of A is packed again by every
    block of its grid row, and a row-major matrix A packs with strided stores: that costs more (12% at 128
    x 768 x 768 on one Zen 5 core), so for the matmul it pays only where it saves a launch; conv2d's NHWC
    patches, written ``r*s`` times the image to memory by a launch of their own, are another matter.
    """
    packing = a_packer is not None or b_packer is not None
    mr, nr, kc_max = tile.mr, tile.nr, tile.kc
    mc, nc, panels_m, panels_n, grid, c_size = _blocking(name, batch, m, n, tile, c_batch_stride, c_row_stride)
    with kernel(name, block=1, grid=grid, host_schedule="dynamic" if tile.dynamic else "static",
                host_max_workers=scratch_slots(batch, m, n, tile) if packing else None) as kb:
        if a_packer is None:
            ap = kb.tensor("ap", f32, packed_a_shape(batch if a_batched else 1, m, k, tile), const=True)
        else:
            pack_panel = a_packer(kb)
        if b_packer is None:
            bp = kb.tensor("bp", f32, packed_b_shape(batch if b_batched else 1, k, n, tile), const=True)
        else:
            pack_slice = b_packer(kb)
        if a_packer is not None:
            aw = kb.tensor("aw", f32, packing_a_workspace_shape(batch, m, n, tile))
        if b_packer is not None:
            bw = kb.tensor("bw", f32, packing_b_workspace_shape(batch, m, n, tile))
        c = kb.tensor("c", f32, (c_size,))
        b = blockIdx.z
        ab, bb = (b if a_batched else 0), (b if b_batched else 0)
        if packing:
            slot = let("slot", worker_slot())
        p0 = let("p0", blockIdx.y * (mc // mr))
        q0 = let("q0", blockIdx.x * (nc // nr))
        p_count = let("p_count", min_(panels_m - p0, mc // mr))
        q_count = let("q_count", min_(panels_n - q0, nc // nr))
        for k0 in range_(k, name="k0", step=kc_max):
            kc = let("kc", min_(k - k0, kc_max))
            if b_packer is not None:
                for qq in range_(q_count, name="qq"):
                    col = (q0 + qq) * nr
                    cols = let("cols", min_(n - col, nr))
                    pack_slice(PanelSlice(bw, slot, qq, b, k0, kc, col, cols))
            if a_packer is not None:
                for pp in range_(p_count, name="pp"):
                    row0 = (p0 + pp) * mr
                    rows = let("rows", min_(m - row0, mr))
                    pack_panel(PanelRows(aw, slot, pp, b, k0, kc, row0, rows))
            for qq in range_(q_count, name="qq"):
                for pp in range_(p_count, name="pp"):
                    p, q = p0 + pp, q0 + qq
                    a_at = _panel(ap, ab, p, k0=k0) if a_packer is None else _panel(aw, slot, pp)
                    b_at = _panel(bp, bb, q, k0=k0) if b_packer is None else _panel(bw, slot, qq)
                    _micro_kernel(c, tile, a_at, b_at, row0=p * mr, col0=q * nr, kc=kc, first=k0 == 0, m=m, n=n,
                                  batch_index=b, c_batch_stride=c_batch_stride, c_row_stride=c_row_stride)
    return lower(kb.kernel)


def _panel(buffer: Buffer, *lead: Expr | int, k0: Expr | None = None) -> Panel:
    """Reads of a packed panel: ``buffer[*lead, k0 + kk, i]`` at step ``kk``, row or column ``i``."""
    return lambda kk, i: buffer[(*lead, kk if k0 is None else k0 + kk, i)]


def _pack_b_slice(src: Buffer, layout: str, nr: int, at: PanelSlice) -> None:
    """One KC x NR slice of B as stored (``(batch, k, n)``, or ``(batch, n, k)`` for ``col``)."""
    bw, slot, qq, b, k0, kc, col, cols = at
    if layout == "row":
        _pack_across("j", nr, cols, kc, bw, lambda kk, j: (slot, qq, kk, j), src, lambda j, kk: (b, k0 + kk, col + j))
    else:
        _pack_lanes("j", nr, cols, kc, bw, lambda kk, j: (slot, qq, kk, j), src, lambda j, kk: (b, col + j, k0 + kk))


def _pack_lanes(lane: str, width: int, valid: Expr, kc: Expr, dst: Buffer, dst_at: Callable[[Expr, Expr], tuple],
                src: Buffer, src_at: Callable[[Expr, Expr], tuple]) -> None:
    """``width`` lanes of a panel over ``kc`` k steps, each lane one contiguous run of ``src``, the lanes from
    ``valid`` on zero: ``dst[dst_at(kk, lane)] = src[src_at(lane, kk)]``."""
    for i in range_(width, name=lane):
        with if_(i < valid):
            for kk in range_(kc, name="kk", simd=True):
                dst[dst_at(kk, i)] = src[src_at(i, kk)]
        with else_():
            for kk in range_(kc, name="kk", simd=True):
                dst[dst_at(kk, i)] = 0.0


def _pack_across(lane: str, width: int, valid: Expr, kc: Expr, dst: Buffer, dst_at: Callable[[Expr, Expr], tuple],
                 src: Buffer, src_at: Callable[[Expr, Expr], tuple]) -> None:
    """The same panel where the source's runs lie across the lanes: per k step, ``width`` lanes of one
    contiguous run, the lanes from ``valid`` on zero."""
    for kk in range_(kc, name="kk"):
        for i in range_(width, name=lane, simd=True):
            _guarded_copy(dst, dst_at(kk, i), i < valid, src, src_at(i, kk))


def _pack_a_panel(a: Buffer, layout: str, mr: int, at: PanelRows) -> None:
    """One MR-panel of A as stored (``(batch, m, k)``, or ``(batch, k, m)`` for ``col``)."""
    aw, slot, pp, b, k0, kc, row0, rows = at
    if layout == "row":
        _pack_lanes("r", mr, rows, kc, aw, lambda kk, r: (slot, pp, kk, r), a, lambda r, kk: (b, row0 + r, k0 + kk))
    else:
        _pack_across("r", mr, rows, kc, aw, lambda kk, r: (slot, pp, kk, r), a, lambda r, kk: (b, k0 + kk, row0 + r))


def _in_c(c: Buffer, value: Expr | int) -> Expr | int:
    """``value`` in the integer type of C's element offsets (``c.index_type``), before it is multiplied by
    a stride, so that an offset computed by hand (batch, row and the tile's rows times their strides)
    cannot wrap where C's own indexing would not: past 2^31 - 1 elements C is indexed in 64 bits (a
    50,000 x 50,000 product, or an image whose MR rows of pixels pass 2^31). Unchanged, so the same code,
    otherwise."""
    if isinstance(value, int) or value.type == c.index_type:
        return value
    return cast(value, c.index_type)


def _micro_kernel(c: Buffer, tile: GemmTile, a_at: Panel, b_at: Panel, *, row0: Expr, col0: Expr, kc: Expr,
                  first: Expr, m: int, n: int, batch_index: Expr, c_batch_stride: int, c_row_stride: int) -> None:
    """One MR x NR tile of C at (``row0``, ``col0``) of batch ``batch_index`` over ``kc`` steps of k:
    ``a_at(kk, i)`` and ``b_at(kk, j)`` read the packed panels; accumulate in registers, then store
    (overwrite on the first KC step, add after it), guarded where the tile crosses M or N."""
    mr, nr = tile.mr, tile.nr
    row0 = let("row0", row0)
    col0 = let("col0", col0)
    tile_c = let("tile_c", _in_c(c, batch_index) * c_batch_stride + _in_c(c, row0) * c_row_stride + _in_c(c, col0))
    if tile.prefetch_c:
        # Rows and columns clamped into C: a hint for a line outside the tensor would be wasted.
        last_row = let("last_row", min_(m - 1 - row0, mr - 1))
        last_col = let("last_col", min_(n - 1 - col0, nr - 1))
        for row in range(mr):
            for line in range(0, nr, LINE_FLOATS):
                offset = _in_c(c, min_(last_row, row)) * c_row_stride + _in_c(c, min_(last_col, line))
                call(prefetch(c.address(tile_c + offset), write=True))
    acc = registers("acc", f32, (mr, nr))
    for i in range_(mr, name="i", unroll=True):
        for j in range_(nr, name="j", simd=True):
            acc[i, j] = 0.0
    for kk in range_(kc, name="kk", unroll=tile.k_unroll if tile.k_unroll > 1 else False):
        for i in range_(mr, name="i", unroll=True):
            a_value = let("a_value", a_at(kk, i))
            for j in range_(nr, name="j", simd=True):
                acc[i, j] = fma(a_value, b_at(kk, j), acc[i, j])
    full = logical_and(row0 + mr <= m, col0 + nr <= n)
    with if_(full):
        _store(c, acc, tile_c, first, mr, nr, c_row_stride, None)
    with else_():
        _store(c, acc, tile_c, first, mr, nr, c_row_stride, (m - row0, n - col0))


def _store(c: Buffer, acc: Buffer, tile_c: Expr, first: Expr, mr: int, nr: int, c_row_stride: int,
           limits: tuple[Expr, Expr] | None) -> None:
    """The tile into C: written on the first KC step (C is not read: it may hold anything), added to
    after it; ``limits`` (rows, columns) guard a tile crossing M or N."""
    with if_(first):
        _store_rows(c, acc, tile_c, False, mr, nr, c_row_stride, limits)
    with else_():
        _store_rows(c, acc, tile_c, True, mr, nr, c_row_stride, limits)


def _store_rows(c: Buffer, acc: Buffer, tile_c: Expr, add: bool, mr: int, nr: int, c_row_stride: int,
                limits: tuple[Expr, Expr] | None) -> None:
    for i in range_(mr, name="i", unroll=True):
        def row(i: Expr = i) -> None:
            for j in range_(nr, name="j", simd=True):
                def element(j: Expr = j) -> None:
                    index = tile_c + _in_c(c, i) * c_row_stride + _in_c(c, j)
                    c[index] = acc[i, j] + c[index] if add else acc[i, j]
                if limits is None:
                    element()
                else:
                    with if_(j < limits[1]):
                        element()
        if limits is None:
            row()
        else:
            with if_(i < limits[0]):
                row()
